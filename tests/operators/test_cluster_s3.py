"""The regeneration on a real Spark cluster and a real object store, end to end, in ``dag.test()`` runs.

A Spark standalone cluster on loopback (support.spark_cluster: one master, two workers, each its own JVM), S3 on
loopback (support.object_store: moto's server in its own process), and an Iceberg REST catalog server whose
FileIO reaches that S3 (support.rest_catalog). The Delta tables live on S3, written there by deltalake; the
Iceberg metadata is written next to them by the Spark application that ``DeltaIcebergRegenerateOperator``
submits to ``spark://127.0.0.1:PORT`` in client deploy mode: the driver plans and publishes, executors in the
worker JVMs write the manifests through the core's own storage (fsspec/s3fs, storage options from an Airflow
``aws`` connection); no hadoop-aws, no s3a. An application gets one executor (a JVM and its Python workers), the
one whose worker is killed two, one per worker.

What is checked: the sensor sees the commits, the executors ran in the workers (the application's Spark event
log and the workers' JSON), pyiceberg reads through the REST catalog the rows deltalake reads (full, then
incremental, then a deletion vector table as Iceberg v3), the S3 secret is on no spark-submit command line, in no
task log and in no result; a worker killed in the middle of the manifests' job (Spark runs its task again on the
other worker: the same manifests as an in-process conversion), and a driver killed before publishing (nothing
visible; the next run converges).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest
from airflow.sdk import DAG, task
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.catalog import load_catalog
from support.manifests import assert_same_manifests, written_manifests
from support.object_store import SECRET_KEY, S3Endpoint, s3_server
from support.rest_catalog import RestServer, rest_catalog_server
from support.spark_cluster import WORKER_CORES, SparkCluster

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator
from airflow_deltaberg.sensors import DeltaCommitSensor

pytestmark = pytest.mark.spark

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
STORAGE_CONN, CATALOG_CONN, SPARK_CONN = "lake_s3", "lake_rest_catalog", "spark_cluster"
CATALOG_NAME = "lake"


# -- the servers (one of each for the module) ------------------------------------------------------------------


@dataclass
class Lake:
    """What a test of this module works with: the cluster, S3, the REST catalog server, and the folder of the Spark
    event logs of the test's applications."""

    cluster: SparkCluster
    s3: S3Endpoint
    rest: RestServer
    events: Path

    @property
    def catalog(self) -> dict[str, str]:
        return {"type": "rest", "uri": self.rest.uri, **self.s3.pyiceberg_properties}

    def spark_conf(self, executors: int = 1) -> dict[str, str]:
        """An application's conf: ``executors`` executors (one core each, on as many workers; each is a JVM and its
        Python workers, so one unless a test needs a second worker to take over), event log on."""
        return {**self.cluster.app_conf(), "spark.cores.max": str(executors * WORKER_CORES),
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": self.events.as_uri(), "spark.eventLog.rolling.enabled": "false",
                "spark.eventLog.compress": "false"}

    def metadata_files(self, table_uri: str) -> dict[str, str]:
        """The Iceberg metadata folder of the table on S3: name -> size (every file, spill files included)."""
        fs = self.s3.filesystem()
        folder = f"{table_uri}/_iceberg/metadata"
        if not fs.exists(folder):
            return {}
        return {p.rsplit("/", 1)[-1]: str(info["size"]) for p, info in fs.find(folder, detail=True).items()}

    def hint(self, table_uri: str) -> str:
        return self.s3.filesystem().cat_file(f"{table_uri}/_iceberg/metadata/version-hint.text").decode()

    def catalog_location(self, identifier: str) -> str:
        return load_catalog(CATALOG_NAME, **self.catalog).load_table(identifier).metadata_location


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from s3_server(tmp_path_factory.mktemp("s3"))


@pytest.fixture(scope="module")
def rest_s3(s3: S3Endpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    yield from rest_catalog_server(tmp_path_factory.mktemp("rest-s3"), s3.iceberg_java_env)


@pytest.fixture
def lake(spark_cluster: SparkCluster, s3: S3Endpoint, rest_s3: RestServer, monkeypatch: pytest.MonkeyPatch,
         tmp_path: Path) -> Lake:
    """The cluster with every worker alive, and the three Airflow connections the DAGs use."""
    spark_cluster.ensure_workers()
    monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN.upper()}", json.dumps(s3.aws_connection()))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CATALOG_CONN.upper()}", json.dumps(
        {"conn_type": "generic", "extra": {"type": "rest", "uri": rest_s3.uri, **s3.pyiceberg_properties}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", json.dumps(
        {"conn_type": "spark", "host": f"spark://{spark_cluster.host}", "port": spark_cluster.port,
         "extra": {"deploy-mode": "client"}}))
    # spark-submit from PATH (the operator only looks beside the Python for a local master): pyspark's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    events = tmp_path / "spark-events"
    events.mkdir()
    return Lake(spark_cluster, s3, rest_s3, events)


# -- rows, events, DAGs ----------------------------------------------------------------------------------------


def canonical(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def delta_rows(s3: S3Endpoint, uri: str, version: int | None = None) -> list[str]:
    """The rows deltalake's kernel-based reader (DataFusion, deletion vectors applied) returns."""
    table = DeltaLakeTable(uri, version=version, storage_options=s3.deltalake_options)
    return canonical(pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()))


def iceberg_rows(catalog: dict[str, str], identifier: str) -> tuple[list[str], int]:
    """The rows pyiceberg reads through the REST catalog, and the Delta version of the current snapshot."""
    table = load_catalog(CATALOG_NAME, **catalog).load_table(identifier)
    version = int(table.current_snapshot().summary["delta-version"])
    return canonical(table.scan().to_arrow()), version


def sales(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"order_id": pa.array(ids, pa.int64()), "amount": pa.array([i * 1.5 for i in ids]),
                     "region": ["eu" if i % 3 else "us" if i % 2 else "apac" for i in ids]})


def regeneration_dag(lake: Lake, dag_id: str, table_uri: str, identifier: str, *, sensor: bool = True,
                     full: bool = False, format_version: int | None = None, executors: int = 1) -> DAG:
    """[wait_for_commits >>] regenerate >> check: the sensor and the operator with the storage connection, the
    operator on the cluster, the check reads Iceberg (pyiceberg, REST) and Delta (deltalake) and compares rows."""
    with DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args={"retries": 0}) as dag:
        wait = DeltaCommitSensor(task_id="wait_for_commits", table_uri=table_uri, start_from="iceberg",
                                 deltaberg_conn_id=STORAGE_CONN, mode="poke", poke_interval=0.5,
                                 timeout=60) if sensor else None
        regenerate = DeltaIcebergRegenerateOperator(
            task_id="regenerate", table_uri=table_uri, version_range=wait.output if wait else None,
            identifier=identifier, catalog_conn_id=CATALOG_CONN, catalog_name=CATALOG_NAME,
            deltaberg_conn_id=STORAGE_CONN, conn_id=SPARK_CONN, conf=lake.spark_conf(executors), full=full,
            format_version=format_version)

        @task
        def check() -> dict[str, Any]:
            from airflow_deltaberg.hooks.catalog import IcebergCatalogHook

            properties = IcebergCatalogHook(catalog_conn_id=CATALOG_CONN).catalog_properties()
            iceberg, version = iceberg_rows(properties, identifier)
            delta = delta_rows(lake.s3, table_uri, version)
            return {"delta_version": version, "rows": len(delta), "equal": iceberg == delta}

        if wait is not None:
            wait >> regenerate
        regenerate >> check()
    return dag


def spark_apps(events: Path) -> list[dict[str, Any]]:
    """Each application's Spark event log (spark.eventLog.dir), in start order: its id, the executors added and
    removed, and every task end (index, attempt, executor, reason)."""
    apps = []
    for log in sorted(events.iterdir(), key=lambda p: p.stat().st_mtime):
        app: dict[str, Any] = {"added": [], "removed": [], "tasks": []}
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app["id"] = event["App ID"]
            elif kind == "SparkListenerExecutorAdded":
                app["added"].append(event["Executor ID"])
            elif kind == "SparkListenerExecutorRemoved":
                app["removed"].append(event["Executor ID"])
            elif kind == "SparkListenerTaskEnd":
                info = event["Task Info"]
                app["tasks"].append((info["Index"], info["Attempt"], info["Executor ID"],
                                     event["Task End Reason"]["Reason"]))
        apps.append(app)
    return apps


def worker_executors(cluster: SparkCluster) -> dict[str, set[str]]:
    """app id -> the ids of the executors the workers run or ran for it (their JSON)."""
    found: dict[str, set[str]] = {}
    for worker in cluster.workers:
        state = worker.json()
        for executor in [*state["executors"], *state["finishedexecutors"]]:
            found.setdefault(executor["appid"], set()).add(str(executor["id"]))
    return found


def secret_free(value: Any) -> bool:
    return SECRET_KEY not in json.dumps(value, default=str)


# -- the DAG: sensor, regeneration on the cluster, check; append, incremental; a DV table as v3 ------------------


def test_dag_on_the_cluster_full_then_incremental(run_dag, dag_id: str, lake: Lake,
                                                  spark_submit_commands: list[dict[str, Any]],
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    uri = lake.s3.uri(f"{dag_id}/sales")
    write_deltalake(uri, sales(0, 12), partition_by=["region"], storage_options=lake.s3.deltalake_options)
    write_deltalake(uri, sales(12, 6), mode="append", storage_options=lake.s3.deltalake_options)
    dag = regeneration_dag(lake, dag_id, uri, "shop.sales")

    first = run_dag(dag)

    assert first.state == "success", {t: first.ti(t).state for t in dag.task_ids}
    assert first.xcom("wait_for_commits")["to_version"] == 1
    regenerated = first.xcom("regenerate")
    assert (regenerated["mode"], regenerated["delta_version"], regenerated["records"]) == ("full", 1, 18)
    assert first.xcom("check") == {"delta_version": 1, "rows": 18, "equal": True}
    # The manifests were written by executors in the worker JVMs, not by the driver.
    (app,) = spark_apps(lake.events)
    assert app["tasks"] and {executor for _, _, executor, _ in app["tasks"]} <= set(app["added"])
    assert "driver" not in app["added"] and all(reason == "Success" for *_, reason in app["tasks"])
    assert set(app["added"]) <= worker_executors(lake.cluster)[app["id"]]

    write_deltalake(uri, sales(100, 5), mode="append", storage_options=lake.s3.deltalake_options)
    second = run_dag(dag)

    assert second.state == "success"
    commits = second.xcom("wait_for_commits")
    assert (commits["from_version"], commits["to_version"]) == (2, 2)
    caught_up = second.xcom("regenerate")
    assert (caught_up["mode"], caught_up["delta_version"], caught_up["snapshots_written"]) == ("incremental", 2, 1)
    assert second.xcom("check") == {"delta_version": 2, "rows": 23, "equal": True}
    assert iceberg_rows(lake.catalog, "shop.sales") == (delta_rows(lake.s3, uri), 2)

    # The S3 secret: only in the 0600 settings files, never on a command line, in a task log or in a result.
    # (Twice per submission: the storage options and the catalog's FileIO properties, each in its own file.)
    assert spark_submit_commands
    for built in spark_submit_commands:
        assert not any(SECRET_KEY in arg for arg in built["command"]), built["command"]
        assert sorted(mode for mode, text in built["files"].values() if SECRET_KEY in text) == [0o600, 0o600]
    logs = capfd.readouterr()
    assert "Regenerating the Iceberg metadata of" in logs.out + logs.err  # the task logs are what was captured
    assert SECRET_KEY not in logs.out + logs.err
    assert all(secret_free(result.xcom(t)) for result in (first, second) for t in dag.task_ids)
    # Nor in the cluster's logs (master, workers, executors' stdout/stderr) and the application's event log.
    logged = [p for folder in (lake.cluster.root, lake.events) for p in folder.rglob("*")
              if p.is_file() and SECRET_KEY.encode() in p.read_bytes()]
    assert logged == []


def test_deletion_vector_table_as_iceberg_v3(run_dag, dag_id: str, lake: Lake, copy_fixture) -> None:
    uri = lake.s3.upload(copy_fixture("table-with-dv-small"), f"{dag_id}/dv")
    dag = regeneration_dag(lake, dag_id, uri, "shop.dv", format_version=3)

    result = run_dag(dag)

    assert result.state == "success", {t: result.ti(t).state for t in dag.task_ids}
    regenerated = result.xcom("regenerate")
    assert (regenerated["mode"], regenerated["delta_version"]) == ("full", 1)
    checked = result.xcom("check")
    assert checked["equal"] is True and checked["rows"] == len(delta_rows(lake.s3, uri)) > 0
    table = load_catalog(CATALOG_NAME, **lake.catalog).load_table("shop.dv")
    assert table.metadata.format_version == 3
    assert any(p.endswith(".puffin") for p in lake.metadata_files(uri))  # the DV became an Iceberg DV


# -- failures: a worker lost in the middle of the job, the driver lost before publishing -------------------------


def when(condition: Callable[[], Any], action: Callable[[Any], None]) -> tuple[threading.Thread, dict[str, Any]]:
    """A thread that runs ``action(found)`` once ``condition()`` returns something (polled every 50 ms), until the
    test sets ``seen["ended"]`` once its run is over: on a loaded machine a job's first task can start minutes
    after the submission (a fixed 120 s wait missed it at load average 23)."""
    seen: dict[str, Any] = {"found": None, "at": None, "ended": threading.Event()}

    def run() -> None:
        while not seen["ended"].is_set():
            found = condition()
            if found is not None:
                seen["found"], seen["at"] = found, time.monotonic()
                action(found)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


def kill_spark_submit(_: Any) -> None:
    """SIGKILL to the spark-submit JVM of the regenerate application this process started (the driver, in client
    mode) and its Python child; not the JVM of the test run's shared Spark session, a SparkSubmit too."""
    for process in psutil.Process().children(recursive=True):
        try:
            command = " ".join(process.cmdline())
            if "org.apache.spark.deploy.SparkSubmit" in command and REGENERATE_APPLICATION in command:
                for victim in [process, *process.children(recursive=True)]:
                    victim.kill()
        except psutil.NoSuchProcess:
            pass


#: The application file the regenerate operator submits (spark/regenerate.py).
REGENERATE_APPLICATION = "airflow_deltaberg/spark/regenerate.py"

#: The files a driver hands its manifest groups to the executors in: the spill files of a full conversion.
GROUP_FILES = ".spill.arrow"


def spilled_groups(lake: Lake, uri: str) -> Callable[[], str | None]:
    """A condition for when(): the name of the first group spill file stored under the table's metadata, from the
    S3 server's request log (a local file read from where the last poll stopped, where listing the bucket every
    50 ms would be an S3 request each; the server logs a request once it has answered it)."""
    prefix = f"PUT /{lake.s3.bucket}/{uri.split('/', 3)[3]}/_iceberg/metadata/"
    read = {"offset": 0, "rest": b""}

    def spilled() -> str | None:
        with lake.s3.log.open("rb") as log:
            log.seek(read["offset"])
            chunk = log.read()
        read["offset"] += len(chunk)
        *lines, read["rest"] = (read["rest"] + chunk).split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            if prefix in text:
                name = text.split(prefix, 1)[1].split(" ", 1)[0]
                if name.endswith(GROUP_FILES):
                    return name
        return None

    return spilled


def test_the_driver_killed_before_publishing(run_dag, dag_id: str, lake: Lake) -> None:
    """A full regeneration whose driver dies once it spilled the groups for the executors: no new metadata
    version, the version hint and the catalog where they were, the rows those of the earlier version; the next
    run converges."""
    uri = lake.s3.uri(f"{dag_id}/orders")
    write_deltalake(uri, sales(0, 9), partition_by=["region"], storage_options=lake.s3.deltalake_options)
    # Converted and registered once (in process: only the run below needs the cluster).
    convert(uri, storage_options=lake.s3.storage_options, catalog_config=lake.catalog, catalog_name=CATALOG_NAME,
            identifier="shop.orders")
    write_deltalake(uri, sales(9, 4), mode="append", storage_options=lake.s3.deltalake_options)
    metadata, hint = lake.metadata_files(uri), lake.hint(uri)
    pointer = lake.catalog_location("shop.orders")
    full = regeneration_dag(lake, dag_id, uri, "shop.orders", sensor=False, full=True)
    watcher, seen = when(spilled_groups(lake, uri), kill_spark_submit)

    killed = run_dag(full)
    seen["ended"].set()
    watcher.join(timeout=10)

    assert seen["found"] is not None, "the driver spilled no groups"
    assert (killed.ti("regenerate").state, killed.state) == ("failed", "failed")
    after = lake.metadata_files(uri)
    assert sorted(n for n in after if n.endswith(".metadata.json")) == sorted(
        n for n in metadata if n.endswith(".metadata.json"))
    assert lake.hint(uri) == hint and lake.catalog_location("shop.orders") == pointer
    left = set(after) - set(metadata)  # the killed attempt's files, referenced by no metadata
    assert any(n.endswith(GROUP_FILES) for n in left), sorted(left)
    assert iceberg_rows(lake.catalog, "shop.orders") == (delta_rows(lake.s3, uri, 0), 0)

    again = run_dag(full)

    assert again.state == "success", {t: again.ti(t).state for t in full.task_ids}
    regenerated = again.xcom("regenerate")
    assert (regenerated["mode"], regenerated["delta_version"]) == ("full", 1)
    assert again.xcom("check") == {"delta_version": 1, "rows": 13, "equal": True}
    # The REST server commits the difference into a metadata file of its own, naming our snapshot.
    table = load_catalog(CATALOG_NAME, **lake.catalog).load_table("shop.orders")
    assert table.metadata_location != pointer
    assert table.metadata.current_snapshot_id == regenerated["snapshot_id"]


# Last in the module: the worker it kills is started again only for a test after it (the lake fixture).
def test_a_worker_killed_in_the_middle_of_the_job(run_dag, dag_id: str, lake: Lake, tmp_path: Path) -> None:
    """The worker whose executor started the manifests' task is killed (with its executor and Python workers)
    while the task runs: Spark runs it again on the other worker, and the manifests are those of an in-process
    conversion of the same table, entry by entry."""
    local = tmp_path / "events"
    for part in range(6):
        write_deltalake(str(local), sales(part * 10, 10), partition_by=["region"], mode="append")
    uri = lake.s3.upload(local, f"{dag_id}/events")
    in_process = convert(str(local))
    dag = regeneration_dag(lake, dag_id, uri, "shop.events", sensor=False, executors=2)
    before = lake.cluster.app_dirs()
    watcher, seen = when(lambda: lake.cluster.worker_running_a_task(ignore=before),
                         lambda index: lake.cluster.workers[index].kill())

    result = run_dag(dag)
    seen["ended"].set()
    watcher.join(timeout=10)

    assert seen["found"] is not None, "no executor started a task"
    assert result.state == "success", {t: result.ti(t).state for t in dag.task_ids}
    assert result.xcom("check") == {"delta_version": 5, "rows": 60, "equal": True}
    (app,) = spark_apps(lake.events)
    failed = [(index, executor) for index, _, executor, reason in app["tasks"] if reason == "ExecutorLostFailure"]
    succeeded = {index: executor for index, _, executor, reason in app["tasks"] if reason == "Success"}
    assert failed, app["tasks"]
    for index, executor in failed:  # each lost task ran again, on the executor of the other worker
        assert succeeded[index] != executor
    assert {executor for _, executor in failed} <= set(app["removed"])
    assert_same_manifests(written_manifests(in_process.metadata_location, local),
                          written_manifests(result.xcom("regenerate")["metadata_location"], uri,
                                            lake.s3.filesystem()))
