"""Airflow for the operator and notifier tests: a migrated SQLite metadata DB in the throwaway AIRFLOW_HOME,
``dag.test()`` runs of DAGs defined in the tests, and local SMTP and HTTP servers that record what they get.

tests/conftest.py sets AIRFLOW_HOME (a temp dir) before Airflow is first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def _load_tables() -> ModuleType:
    # Loaded under a unique name: tests/airflow is no package (it would shadow `airflow`), and a bare
    # `import tables` could collide with another test directory's helper module.
    path = Path(__file__).with_name("tables.py")
    spec = importlib.util.spec_from_file_location("deltaberg_airflow_test_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tables = _load_tables()


# -- metadata database and DAG runs ---------------------------------------------------------------


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Run ``airflow db migrate`` once against the SQLite DB of the throwaway AIRFLOW_HOME."""
    home = Path(os.environ["AIRFLOW_HOME"])
    result = subprocess.run(
        [AIRFLOW, "db", "migrate"], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    db = home / "airflow.db"
    assert db.is_file(), f"airflow db migrate left no {db}"
    return db


def register_dag(dag: Any) -> None:
    """Write ``dag`` to the metadata DB (DagModel, serialized DAG, version) as the DAG processor would.

    Airflow 3.3's ``dag.test()`` only runs DAGs that are serialized in the DB; DAGs defined in a test are in
    no DAG bundle, so they are written here under the default ``dags-folder`` bundle.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


@dataclass
class DagRunResult:
    """A finished ``dag.test()`` run, with its task instances and XComs read back from the metadata DB."""

    dag_run: Any

    @property
    def state(self) -> str:
        return str(self.dag_run.state)

    def ti(self, task_id: str) -> Any:
        (ti,) = [ti for ti in self.dag_run.get_task_instances() if ti.task_id == task_id]
        return ti

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        """The stored XCom value of ``task_id``; None when there is none."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            query = XComModel.get_many(
                run_id=self.dag_run.run_id, key=key, task_ids=task_id, dag_ids=self.dag_run.dag_id
            )
            rows = session.scalars(query).all()
            return XComModel.deserialize_value(rows[0]) if rows else None


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[..., DagRunResult]:
    """``run_dag(dag, **test_kwargs)`` registers ``dag`` and runs ``dag.test()``."""

    def _run(dag: Any, **kwargs: Any) -> DagRunResult:
        register_dag(dag)
        return DagRunResult(dag.test(**kwargs))

    return _run


@pytest.fixture
def dag_id(request: pytest.FixtureRequest) -> str:
    """A DAG id unique to the test."""
    return "deltaberg_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:200]


# -- tables -----------------------------------------------------------------------------------------


@pytest.fixture
def table_helpers() -> ModuleType:
    """tests/airflow/tables.py (write_compliant_table, write_plain_table, disable_writer_compat, ...)."""
    return tables


@pytest.fixture
def compliant_table(tmp_path: Path) -> Path:
    return tables.write_compliant_table(tmp_path / "compliant")


@pytest.fixture
def plain_table(tmp_path: Path) -> Path:
    return tables.write_plain_table(tmp_path / "plain")


@pytest.fixture
def plain_failed_rules() -> frozenset[str]:
    return tables.PLAIN_TABLE_FAILED_RULES


# -- local servers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SmtpServer:
    host: str
    port: int
    messages: list[Message] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)


@pytest.fixture
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


@pytest.fixture
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

