"""An Iceberg REST catalog server on loopback for the catalog tests: Iceberg's own RESTCatalogServer (the
iceberg-open-api test fixture, a JdbcCatalog on SQLite behind the REST servlet), started with java on a free port.

Its jars come from ``scripts/fetch_jars.sh`` (``<repo>/.jars/rest``, or ``$DELTABERG_JARS_DIR/rest``). When they
or java are missing the tests that need the server are skipped locally, and fail under CI (``$CI`` set).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
REST_JARS_DIR = (REPO_ROOT / os.environ.get("DELTABERG_JARS_DIR", ".jars") / "rest").resolve()
SERVER_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class RestServer:
    uri: str
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def _unavailable(reason: str) -> None:
    """Skip, or fail when running under CI (a CI run that silently skips the REST catalog proves nothing)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is an error rather than a skip)", pytrace=False)
    pytest.skip(reason)


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(process: subprocess.Popen[bytes], uri: str, server: RestServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the REST catalog server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the REST catalog server did not answer within {START_TIMEOUT_S} s:\n{server.log_tail()}")


@pytest.fixture(scope="session")
def rest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    """A running REST catalog server (one per test run; tests keep apart by namespace)."""
    if not list(REST_JARS_DIR.glob("iceberg-open-api-*-test-fixtures.jar")):
        _unavailable(f"the REST catalog server jars are not in {REST_JARS_DIR}; run scripts/fetch_jars.sh")
    java = _java()
    if java is None:
        _unavailable("no Java runtime (java not on PATH, JAVA_HOME unset): the REST catalog server cannot start")
    root = tmp_path_factory.mktemp("rest-catalog")
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = RestServer(uri, root / "server.log")
    env = {
        **os.environ,
        # RESTCatalogServer reads its catalog properties from CATALOG_* (CATALOG_REST_PORT -> rest.port).
        "CATALOG_REST_PORT": str(port),
        "CATALOG_WAREHOUSE": (root / "warehouse").as_uri(),
        # A file, not the default in-memory SQLite: every pooled JDBC connection must see the same catalog.
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
    }
    with server.log.open("wb") as log:
        process = subprocess.Popen(
            [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{REST_JARS_DIR}/*", SERVER_CLASS],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=root,
        )
    try:
        _wait_until_up(process, uri, server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
