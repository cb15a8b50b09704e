"""DeltaIcebergRegenerateOperator in one real ``dag.test()`` run: spark-submit of the packaged application on
``spark_default`` = local[*], the version range taken from an upstream task's XCom (as the Delta commit sensor
returns it), the ConversionResult as XCom, the Iceberg table read back with pyiceberg through a SQLite catalog,
and the asset event in the metadata DB. A version the table does not have fails inside the application and
arrives as VersionNotFoundError, without retries; bad ranges fail in the same run without retries and without
Spark."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG, Asset, task
from airflow.sdk.exceptions import AirflowFailException
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog
from support.secrets import STORAGE_SECRET, assert_secret_only_in_private_files
from support.spark_session import submit_conf

from airflow_deltaberg.core.errors import VersionNotFoundError
from airflow_deltaberg.core.iceberg.convert import ConversionResult
from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator, version_bounds

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
NO_DELAY = dt.timedelta(seconds=0)
#: A short-lived JVM: no UI, C1-only JIT and the serial GC (quicker on a 2-core machine).


def rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"name-{i}" for i in ids],
                     "region": ["eu" if i % 2 else "us" for i in ids]})


def canonical(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in table.select(["id", "name", "region"]).to_pylist())


def asset_events(dag_id: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(AssetEvent, AssetModel.uri).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
             .where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.id))
    with create_session() as session:
        return [{"uri": uri, "task_id": e.source_task_id, "extra": dict(e.extra)}
                for e, uri in session.execute(query).all()]


def test_regenerate_through_spark_submit(run_dag, dag_id: str, tmp_path: Path, secret_storage_connection: str,
                                         spark_submit_commands: list[dict[str, Any]],
                                         capfd: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "events"
    write_deltalake(str(table), rows(0, 6), partition_by=["region"])  # version 0
    write_deltalake(str(table), rows(6, 4), mode="append")  # version 1
    DeltaLakeTable(str(table)).create_checkpoint()
    write_deltalake(str(table), rows(10, 5), mode="append")  # version 2: not asked for
    catalog_config = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    caught: dict[str, BaseException | None] = {}

    def remember(context: Any) -> None:
        caught[context["ti"].task_id] = context.get("exception")

    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        @task
        def new_commits() -> dict[str, int]:
            return {"from_version": 0, "to_version": 1}

        DeltaIcebergRegenerateOperator(
            task_id="regenerate", table_uri=str(table), version_range=new_commits(), identifier="db.events",
            catalog_config=catalog_config, conf=submit_conf(), deltaberg_conn_id=secret_storage_connection,
            format_version=3,
        )
        DeltaIcebergRegenerateOperator(  # fails inside the Spark application: the error comes back typed
            task_id="too_far", table_uri=str(table), version=7, conf=submit_conf(),
            deltaberg_conn_id=secret_storage_connection, retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
        DeltaIcebergRegenerateOperator(
            task_id="backwards", table_uri=str(table), version_range={"from_version": 3, "to_version": 1},
            retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
        DeltaIcebergRegenerateOperator(
            task_id="disagreeing", table_uri=str(table), version=2, version_range='{"to_version": 1}',
            retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
    assert dag.get_task("regenerate").outlets == [Asset(uri="iceberg://deltaberg/db/events")]
    assert dag.get_task("regenerate").inlets == [Asset(uri=f"delta://file{table}")]

    capfd.readouterr()
    result = run_dag(dag)
    logs = capfd.readouterr()

    ti = result.ti("regenerate")
    assert (ti.state, ti.try_number) == ("success", 1)
    summary = result.xcom("regenerate")
    assert set(summary) == set(ConversionResult.__dataclass_fields__)
    assert (summary["mode"], summary["delta_version"], summary["identifier"]) == ("full", 1, "db.events")
    assert (summary["records"], summary["files_added"]) == (10, len(DeltaLakeTable(str(table), version=1).file_uris()))
    iceberg = load_catalog("deltaberg", **catalog_config).load_table("db.events")
    assert iceberg.metadata_location == summary["metadata_location"]
    assert iceberg.metadata.format_version == 3  # --format-version reached the application
    read_back = iceberg.scan().to_arrow_batch_reader().read_all()
    assert canonical(read_back) == canonical(DeltaLakeTable(str(table), version=1).to_pyarrow_table())
    assert asset_events(dag_id) == [{
        "uri": "iceberg://deltaberg/db/events", "task_id": "regenerate",
        "extra": {k: summary[k] for k in ("table", "mode", "delta_version", "snapshot_id", "metadata_location",
                                          "files_added", "records", "identifier")} | {"catalog_name": "deltaberg"},
    }]
    assert_secret_only_in_private_files(spark_submit_commands, STORAGE_SECRET)
    too_far = result.ti("too_far")
    assert (too_far.state, too_far.try_number, too_far.max_tries) == ("failed", 1, 2)  # not retryable
    assert type(caught["too_far"]) is AirflowFailException
    arrived = caught["too_far"].__cause__
    assert type(arrived) is VersionNotFoundError and arrived.retryable is False
    assert arrived.table == str(table) and str(caught["too_far"]) == f"VersionNotFoundError: {arrived}"
    assert_spark_output_summarized(logs.out + logs.err)
    for task_id, message in (("backwards", "from_version 3 > to_version 1"),
                             ("disagreeing", "version 2 and version_range's to_version 1 disagree")):
        failed = result.ti(task_id)
        assert (failed.state, failed.try_number, failed.max_tries) == ("failed", 1, 2), task_id
        assert type(caught[task_id]).__name__ == "AirflowFailException"
        assert message in str(caught[task_id])


#: A line of Spark's own log (log4j's default pattern: ``26/11/26 17:00:00 INFO SparkContext: ...``).
SPARK_LOG_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR) \w+")


def assert_spark_output_summarized(task_logs: str) -> None:
    """The task logs of the two submissions: no line of Spark's log (there were 163 of 194 lines in a regeneration),
    and a summary of each: its outcome, and on failure the line that says why."""
    spark_lines = [line for line in task_logs.splitlines() if SPARK_LOG_LINE.search(line)]
    assert spark_lines == [], f"{len(spark_lines)} Spark log lines in the task logs, e.g. {spark_lines[:3]}"
    summaries = [line for line in task_logs.splitlines() if "spark-submit: " in line and "lines of output" in line]
    assert len(summaries) == 2, summaries
    succeeded = r"\[info +\] spark-submit: (application \S+|the application) succeeded; its \d+ lines of output"
    assert any(re.search(succeeded, s) for s in summaries), summaries
    assert any(re.search(r"\[error +\] spark-submit: .* failed", s) for s in summaries), summaries
    assert re.search(r"^  regenerate failed: VersionNotFoundError: version 7", task_logs, re.MULTILINE)


@pytest.mark.parametrize(
    ("version", "version_range", "expected"),
    [
        (None, None, (None, None)),
        ("4", None, (None, 4)),
        (None, {"from_version": 2, "to_version": 5}, (2, 5)),
        (None, "{'from_version': 2, 'to_version': 5}", (2, 5)),  # rendered by a template without native objects
        (5, '{"to_version": 5}', (None, 5)),
    ],
)
def test_version_bounds(version: Any, version_range: Any, expected: tuple[int | None, int | None]) -> None:
    assert version_bounds(version, version_range) == expected


@pytest.mark.parametrize("version_range", [{"from_version": 1}, "[1, 2]", {"to_version": "latest"}])
def test_version_bounds_refuses(version_range: Any) -> None:
    with pytest.raises(ValueError):
        version_bounds(None, version_range)


FAKE_SPARK_SUBMIT = """#!/bin/sh
echo "26/11/26 18:00:00 INFO SparkContext: Running Spark version 4.0.0"
echo "26/11/26 18:00:01 INFO StandaloneSchedulerBackend: Connected to Spark cluster with app ID app-20261126180001-0007"
i=0; while [ $i -lt 50 ]; do echo "26/11/26 18:00:02 INFO DAGScheduler: chatter $i"; i=$((i+1)); done
echo "26/11/26 18:00:03 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)"
echo "regenerate failed: StorageError: cannot read s3://bucket/t/_delta_log"
exit $FAKE_EXIT
"""


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda msg, *args, **kwargs: self.lines.append((level, str(msg) % args if args else str(msg)))


@pytest.mark.parametrize("exit_code", [0, 1])
def test_spark_submit_output_goes_to_debug_and_a_summary_to_the_task_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int) -> None:
    """A SparkSubmitHook of a run (SparkApplicationRun.capture) running a stand-in spark-submit: its 54 lines at
    DEBUG only, one summary at INFO (ERROR on failure, with the error lines), the hook's own messages unchanged."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowException

    from airflow_deltaberg.operators.spark_submit import SparkApplicationRun, SparkTarget

    binary = tmp_path / "bin" / "spark-submit"
    binary.parent.mkdir()
    binary.write_text(FAKE_SPARK_SUBMIT)
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))
    hook = SparkSubmitHook(conn_id=None, name="fake")
    hook._log = log = RecordingLog()
    with SparkApplicationRun(SparkTarget("local[*]", None, "spark-submit"), "deltaberg-test-") as run:
        captured = run.capture(hook)
        if exit_code:
            with pytest.raises(AirflowException):
                run.result(lambda: captured.submit("app.py"))
        else:
            assert run.result(lambda: captured.submit("app.py")) is None  # no result document
    above_debug = [(level, line) for level, line in log.lines if level != "debug"]
    assert [line for level, line in log.lines if level == "debug"][0].endswith("Running Spark version 4.0.0")
    assert sum(level == "debug" for level, _ in log.lines) == 54
    assert above_debug[0][0] == "info" and above_debug[0][1].startswith("Spark-Submit cmd: spark-submit")
    (level, summary), = above_debug[1:]
    if exit_code:
        assert level == "error" and summary == (
            "spark-submit: application app-20261126180001-0007 failed; its 54 lines of output are logged at DEBUG; "
            "the error lines:\n"
            "  26/11/26 18:00:03 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)\n"
            "  regenerate failed: StorageError: cannot read s3://bucket/t/_delta_log")
    else:
        assert (level, summary) == (
            "info", "spark-submit: application app-20261126180001-0007 succeeded; its 54 lines of output are logged "
            "at DEBUG")
