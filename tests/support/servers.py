"""Free loopback ports and servers on them that record what they receive (SMTP, HTTP webhooks).

The servers are generators: support.plugin turns them into fixtures."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stop a server process: SIGTERM, then SIGKILL when it has not exited after 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


def free_port() -> int:
    """A loopback port nothing listens on right now (bound, then closed): for a server to start on, or for a
    client to be refused on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SmtpServer:
    host: str
    port: int
    messages: list[Message] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)


def smtp_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SmtpServer]:
    """An aiosmtpd server on 127.0.0.1 that keeps every message; connection ``smtp_test`` points at it."""
    from aiosmtpd.controller import Controller

    server = SmtpServer("127.0.0.1", free_port())

    class Handler:
        async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
            server.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            server.messages.append(message_from_bytes(envelope.original_content or envelope.content))
            return "250 Message accepted for delivery"

    controller = Controller(Handler(), hostname=server.host, port=server.port, ready_timeout=10)
    controller.start()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMTP_TEST",
        json.dumps(
            {
                "conn_type": "smtp",
                "host": server.host,
                "port": server.port,
                "extra": {
                    "disable_tls": True,
                    "disable_ssl": True,
                    "from_email": "airflow@deltaberg.test",
                    "timeout": 10,
                    "retry_limit": 0,
                },
            }
        ),
    )
    try:
        yield server
    finally:
        controller.stop()


@dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookServer:
    host: str
    port: int
    requests: list[ReceivedRequest] = field(default_factory=list)
    status: int = 200

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def webhook_server() -> Iterator[WebhookServer]:
    """An http.server on 127.0.0.1 (in a thread) that records each request and answers ``status``."""
    state = WebhookServer("127.0.0.1", 0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, 10_000_000))
            state.requests.append(ReceivedRequest("POST", self.path, dict(self.headers.items()), body))
            answer = b'{"ok": true}' if state.status < 400 else b'{"ok": false}'
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    httpd = ThreadingHTTPServer((state.host, 0), Handler)
    httpd.timeout = 10
    state.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the webhook server thread did not stop"

