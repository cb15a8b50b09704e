"""A loopback HTTP proxy in front of the S3 server that injects faults per request.

Clients are pointed at the proxy's endpoint instead of the server's. Each request is read whole (answering
``Expect: 100-continue`` itself), then ``decide(request)`` names what happens to it:

- ``None``: forwarded, and the server's response relayed;
- ``"500"``, ``"503"``: an S3 error response, the request never reaches the server;
- ``"reset-before"``: the connection reset before the request reaches the server;
- ``"reset-after"``: forwarded (the request lands), then the connection reset instead of the response;
- ``"lost"``: forwarded, then the connection closed without a response (a response lost on the way);
- ``"truncated"``: forwarded, the response's headers and half its body sent, then the connection closed;
- ``"stall"``: nothing answered (not even ``100 Continue``) for ``stall_s`` seconds, then the connection closed.

Every connection carries one request (the proxy answers ``Connection: close``). Every wait is bounded: socket
timeouts, and stalls end at ``stall_s`` or when the proxy stops.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

FAULTS = ("500", "503", "reset-before", "reset-after", "lost", "truncated", "stall")
#: Longest a socket operation of the proxy waits (a client or the server that stops talking).
IO_TIMEOUT_S = 30.0
_MAX_HEADER_BYTES = 64 << 10


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


Decide = Callable[[Request], str | None]


def seeded_faults(seed: int, rate: float, faults: Sequence[str] = FAULTS,
                  weights: Sequence[float] | None = None) -> Decide:
    """A fault for each request with probability ``rate``, drawn from ``faults`` (by ``weights``, else evenly): the
    same requests in the same order get the same faults."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def decide(_request: Request) -> str | None:
        with lock:
            return rng.choices(faults, weights)[0] if rng.random() < rate else None

    return decide


@dataclass
class FaultProxy:
    """A running proxy to ``upstream`` (host, port); ``decide`` may be swapped at any time."""

    upstream: tuple[str, int]
    decide: Decide
    stall_s: float
    port: int = 0
    #: (method, target, fault) of every request read, in order.
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def faults(self) -> list[str]:
        return [fault for _, _, fault in list(self.log) if fault is not None]

    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True, name="fault-proxy").start()

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(IO_TIMEOUT_S)
        try:
            with client:
                self._exchange(client)
        except OSError:
            pass  # the client went away, or the server did: the client sees what it sees

    def _exchange(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        head = _read_head(reader)
        if head is None:
            return
        request_line, headers, raw_head = head
        method, target, _ = request_line.split(" ", 2)
        fault = self.decide(Request(method, target, headers))
        self.log.append((method, target, fault))
        if fault == "stall":
            self._stop.wait(self.stall_s)
            return
        if headers.get("expect", "").lower() == "100-continue":
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = _read_body(reader, headers)
        if fault in ("500", "503"):
            client.sendall(_error_response(int(fault), with_body=method != "HEAD"))
            return
        if fault == "reset-before":
            _reset(client)
            return
        response = self._forward(_upstream_head(raw_head) + body)
        if fault == "reset-after":
            _reset(client)
        elif fault == "lost":
            client.shutdown(socket.SHUT_RDWR)
        elif fault == "truncated":
            head_end = response.index(b"\r\n\r\n") + 4
            client.sendall(response[: head_end + (len(response) - head_end) // 2])
        else:
            client.sendall(response)

    def _forward(self, request: bytes) -> bytes:
        """The server's whole response to ``request`` (sent with ``Connection: close``: read to its end)."""
        with socket.create_connection(self.upstream, timeout=IO_TIMEOUT_S) as upstream:
            upstream.sendall(request)
            chunks = []
            while chunk := upstream.recv(1 << 16):
                chunks.append(chunk)
        response = b"".join(chunks)
        head_end = response.index(b"\r\n\r\n")
        lines = response[:head_end].split(b"\r\n")
        kept = [line for line in lines[1:] if not line.lower().startswith(b"connection:")]
        return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + response[head_end:]

    def stop(self) -> None:
        self._stop.set()


def _read_head(reader: object) -> tuple[str, dict[str, str], list[bytes]] | None:
    lines: list[bytes] = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEADER_BYTES)  # type: ignore[attr-defined]
        if not line:
            return None
        size += len(line)
        if size > _MAX_HEADER_BYTES:
            raise OSError("request head too long")
        if line in (b"\r\n", b"\n"):
            break
        lines.append(line.rstrip(b"\r\n"))
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0].decode("latin-1"), headers, lines


def _read_body(reader: object, headers: dict[str, str]) -> bytes:
    """The body as it came (chunked bodies with their chunk framing, which the server reads again)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = reader.readline(1024)  # type: ignore[attr-defined]
            if not size_line:
                raise OSError("chunked body cut short")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (trailer := reader.readline(1024)) not in (b"\r\n", b"\n", b""):  # type: ignore[attr-defined]
                    parts.append(trailer)
                parts.append(b"\r\n")
                return b"".join(parts)
            parts.append(_read_exactly(reader, size + 2))
    return _read_exactly(reader, int(headers.get("content-length") or 0))


def _read_exactly(reader: object, size: int) -> bytes:
    data = reader.read(size)  # type: ignore[attr-defined]
    if len(data) != size:
        raise OSError("body cut short")
    return data


def _upstream_head(lines: list[bytes]) -> bytes:
    """The request head as sent to the server: without Expect (the proxy answered it) and its own Connection."""
    kept = [line for line in lines[1:] if not line.lower().startswith((b"expect:", b"connection:"))]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"


def _error_response(status: int, *, with_body: bool) -> bytes:
    """An S3 error response (the answer to a HEAD has no body, only its length)."""
    code, reason = {500: ("InternalError", "Internal Server Error"), 503: ("SlowDown", "Service Unavailable")}[status]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>injected by the fault '
            f"proxy</Message><RequestId>fault</RequestId></Error>").encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + (body if with_body else b"")


def _reset(client: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), not an orderly shutdown."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@contextmanager
def fault_proxy(upstream: str, decide: Decide | None = None, *, stall_s: float = 5.0) -> Iterator[FaultProxy]:
    """A FaultProxy to the ``upstream`` endpoint (``http://127.0.0.1:<port>``) on a free loopback port, stopped at
    the end (stalled exchanges end then too)."""
    host, _, port = upstream.removeprefix("http://").partition(":")
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = FaultProxy((host, int(port)), decide or (lambda _request: None), stall_s,
                       port=listener.getsockname()[1])
    server = threading.Thread(target=proxy.serve, args=(listener,), daemon=True, name="fault-proxy-accept")
    server.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        server.join(timeout=5)
        listener.close()
