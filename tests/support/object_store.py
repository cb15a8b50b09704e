"""An S3 endpoint on loopback: moto's server in a process of its own (the Spark driver and executors, deltalake and
pyiceberg all reach it over HTTP), one bucket, and the credentials each client wants them in.

moto accepts any key pair; the secret below is distinctive so that a test can look for it where it must not be
(command lines, logs, results).
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.servers import free_port, stop_process

START_TIMEOUT_S = 30.0
ACCESS_KEY = "deltaberg-test-key"
#: Reaches the Spark application only through the operator's private settings file.
SECRET_KEY = "s3-secret-0f4b9a1c-cluster-tests"
REGION = "us-east-1"
BUCKET = "lake"


@dataclass(frozen=True)
class S3Endpoint:
    endpoint: str
    bucket: str
    log: Path

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key.strip('/')}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec (s3fs) storage options, as DeltaStorageHook builds them from an ``aws`` connection."""
        return {"key": ACCESS_KEY, "secret": SECRET_KEY, "endpoint_url": self.endpoint,
                "client_kwargs": {"region_name": REGION}}

    @property
    def deltalake_options(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    @property
    def pyiceberg_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties (client side of a catalog)."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
                "s3.region": REGION}

    @property
    def iceberg_java_env(self) -> dict[str, str]:
        """The REST catalog server's S3FileIO properties as its CATALOG_* environment (``_`` -> ``.``,
        ``__`` -> ``-``)."""
        return {"CATALOG_IO__IMPL": "org.apache.iceberg.io.ResolvingFileIO", "CATALOG_S3_ENDPOINT": self.endpoint,
                "CATALOG_S3_PATH__STYLE__ACCESS": "true", "CATALOG_S3_ACCESS__KEY__ID": ACCESS_KEY,
                "CATALOG_S3_SECRET__ACCESS__KEY": SECRET_KEY, "CATALOG_CLIENT_REGION": REGION}

    def aws_connection(self) -> dict[str, Any]:
        """An Airflow ``aws`` connection (as JSON for AIRFLOW_CONN_*) for DeltaStorageHook."""
        return {"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY,
                "extra": {"endpoint_url": self.endpoint, "region_name": REGION}}

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=self.endpoint,
                                 client_kwargs={"region_name": REGION}, skip_instance_cache=True)

    def upload(self, local: Path, key: str) -> str:
        """Copy the folder ``local`` to ``key`` in the bucket; returns its URI."""
        fs = self.filesystem()
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{self.bucket}/{key.strip('/')}/{path.relative_to(local).as_posix()}")
        return self.uri(key)


def s3_server(root: Path) -> Iterator[S3Endpoint]:
    """The body of a fixture: ``moto_server`` on a free loopback port with bucket BUCKET; stopped at the end."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = S3Endpoint(endpoint, BUCKET, root / "moto.log")
    moto = Path(sys.executable).parent / "moto_server"
    with server.log.open("wb") as log:
        process = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {process.returncode}: {server.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not answer within {START_TIMEOUT_S} s") from None
                time.sleep(0.1)
        import boto3

        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                     region_name=REGION).create_bucket(Bucket=BUCKET)
        yield server
    finally:
        stop_process(process)
