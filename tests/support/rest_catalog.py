"""An Iceberg REST catalog server on loopback for the catalog tests: Iceberg's own RESTCatalogServer (the
iceberg-open-api test fixture, a JdbcCatalog on SQLite behind the REST servlet), started with java on a free port.

Its jars come from ``scripts/fetch_jars.sh`` (``JARS_DIR/rest``). When they or java are missing the tests that
need the server fail and say so.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.environment import JARS_DIR
from support.servers import free_port, stop_process
from support.spark_session import java

REST_JARS_DIR = JARS_DIR / "rest"
#: Iceberg's S3FileIO and the AWS SDK bundle, for a server whose tables live on S3 (``rest_catalog_server(s3=...)``).
REST_AWS_JARS_DIR = JARS_DIR / "rest-aws"
SERVER_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class RestServer:
    uri: str
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


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


def rest_catalog_server(root: Path, s3_env: Mapping[str, str] | None = None) -> Iterator[RestServer]:
    """The body of the ``rest_server`` fixture of support.plugin: a running server whose catalog lives in ``root``.

    ``s3_env``: the CATALOG_* properties of an S3 FileIO (support.object_store), for tables on S3; the server then
    has Iceberg's S3FileIO on its classpath (it reads the metadata a table is registered on, and writes its own).
    """
    if not list(REST_JARS_DIR.glob("iceberg-open-api-*-test-fixtures.jar")):
        pytest.fail(f"the REST catalog server jars are not in {REST_JARS_DIR}; run scripts/fetch_jars.sh",
                    pytrace=False)
    classpath = f"{REST_JARS_DIR}/*"
    if s3_env is not None:
        if not list(REST_AWS_JARS_DIR.glob("iceberg-aws-bundle-*.jar")):
            pytest.fail(f"the REST catalog server's S3 jars are not in {REST_AWS_JARS_DIR}; run "
                        "scripts/fetch_jars.sh", pytrace=False)
        classpath += f":{REST_AWS_JARS_DIR}/*"
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = RestServer(uri, root / "server.log")
    env = {
        **os.environ,
        # RESTCatalogServer reads its catalog properties from CATALOG_* (CATALOG_REST_PORT -> rest.port).
        "CATALOG_REST_PORT": str(port),
        "CATALOG_WAREHOUSE": (root / "warehouse").as_uri(),
        # A file, not the default in-memory SQLite: every pooled JDBC connection must see the same catalog.
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
        **(s3_env or {}),
    }
    with server.log.open("wb") as log:
        process = subprocess.Popen(
            [java(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, SERVER_CLASS],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=root,
        )
    try:
        _wait_until_up(process, uri, server)
        yield server
    finally:
        stop_process(process)
