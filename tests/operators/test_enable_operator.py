"""DeltaEnableIcebergWriterCompatOperator in real ``dag.test()`` runs: dry run, metadata-only, refusals; and the
rewrite submitted through SparkSubmit (spark_default = local[*]) in the spark test group."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from support.secrets import STORAGE_SECRET, assert_secret_only_in_private_files
from support.spark_session import delta_spark_jars, jvm_options, submit_conf
from support.tables import id_mode_table, log_bytes, rows_of

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.operators import DeltaEnableIcebergWriterCompatOperator
from airflow_deltaberg.operators.enable import PLAN_XCOM_KEY

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
NO_DELAY = dt.timedelta(seconds=0)


def make_dag(dag_id: str, **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


def test_dry_run_pushes_the_plan_and_writes_nothing(run_dag: Callable[..., Any], dag_id: str,
                                                    deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t", partition_by=["part"])
    before = log_bytes(path)
    with make_dag(dag_id, params={"table": str(path)}) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri="{{ params.table }}", mode="{{ 'auto' }}",
                                               dry_run="{{ 'True' }}")
    result = run_dag(dag)
    assert result.state == "success"
    plan = result.xcom("enable", PLAN_XCOM_KEY)
    assert plan["table"] == str(path) and plan["read_version"] == 0
    assert plan["needs_rewrite"] is True
    assert [r.split(":")[0] for r in plan["reasons"]] == ["no-column-mapping", "partition-values-not-materialized"]
    # The default level, and what it costs: which known writers can still write the table afterwards.
    assert plan["level"] == "writer-compat-v1"
    assert engines(plan, "can_write") == ["delta-kernel-4.4", "databricks"]
    assert {"delta-spark-4.4", "deltalake-1.6"} <= set(engines(plan, "will_refuse"))
    returned = result.xcom("enable")
    assert returned["action"] == "dry-run" and returned["plan"] == plan
    assert log_bytes(path) == before


def engines(plan: dict[str, Any], which: str) -> list[str]:
    return [entry["engine"] for entry in plan["writers"][which]]


def test_compat_v2_level(run_dag: Callable[..., Any], dag_id: str, deltalake_table: Callable[..., Path],
                         rows: pa.Table) -> None:
    """level=compat-v2 on an empty table: IcebergCompatV2 only (no IcebergWriterCompatV1), and the plan says Delta
    on Spark still writes the table."""
    path = deltalake_table("t", data=rows.slice(0, 0))
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path), level="{{ 'compat-v2' }}")
    result = run_dag(dag)
    assert result.state == "success"
    returned = result.xcom("enable")
    assert (returned["action"], returned["committed_version"]) == ("metadata-only", 1)
    plan = result.xcom("enable", PLAN_XCOM_KEY)
    assert plan["level"] == "compat-v2"
    assert "delta-spark-4.4" in engines(plan, "can_write") and "deltalake-1.6" in engines(plan, "will_refuse")
    snapshot = DeltaTable(str(path)).snapshot()
    assert snapshot.metadata.bool_property("delta.enableIcebergCompatV2")
    assert not snapshot.metadata.bool_property("delta.enableIcebergWriterCompatV1")
    assert "icebergWriterCompatV1" not in snapshot.protocol.effective_writer_features
    assert validate(str(path), "compat-v2", data_checks=True).compliant


def test_bad_level_fails_without_retries(run_dag: Callable[..., Any], dag_id: str,
                                         deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path), level="compat-v9", retries=2,
                                               retry_delay=NO_DELAY)
    result = run_dag(dag)
    assert result.ti("enable").state == "failed" and result.ti("enable").try_number == 1
    assert result.xcom("enable", PLAN_XCOM_KEY) is None
    assert log_bytes(path) == before


def test_metadata_only_enable(run_dag: Callable[..., Any], dag_id: str, tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    rows = rows_of(path)
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path))
    result = run_dag(dag)
    assert result.state == "success"
    returned = result.xcom("enable")
    assert (returned["action"], returned["committed_version"]) == ("metadata-only", 2)
    assert result.xcom("enable", PLAN_XCOM_KEY)["needs_rewrite"] is False
    assert validate(str(path), data_checks=True).compliant
    assert rows_of(path) == rows


def test_refused_enable_fails_without_retries(run_dag: Callable[..., Any], dag_id: str,
                                              deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path), mode="metadata_only",
                                               retries=2, retry_delay=NO_DELAY)
    result = run_dag(dag)
    ti = result.ti("enable")
    assert ti.state == "failed" and ti.try_number == 1
    assert result.xcom("enable", PLAN_XCOM_KEY)["needs_rewrite"] is True  # published before the refusal
    assert log_bytes(path) == before


def test_bad_mode_fails(run_dag: Callable[..., Any], dag_id: str, deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path), mode="quick", retries=2,
                                               retry_delay=NO_DELAY)
    result = run_dag(dag)
    assert result.ti("enable").state == "failed" and result.ti("enable").try_number == 1
    assert result.xcom("enable", PLAN_XCOM_KEY) is None


# -- the rewrite through SparkSubmit ----------------------------------------------------------------------


@pytest.mark.spark
def test_rewrite_is_submitted_through_spark_submit(run_dag: Callable[..., Any], dag_id: str,
                                                   deltalake_table: Callable[..., Path],
                                                   monkeypatch: pytest.MonkeyPatch, secret_storage_connection: str,
                                                   spark_submit_commands: list[dict[str, Any]]) -> None:
    """The rewrite runs through spark-submit; the storage options reach it in a file only this user reads. The
    run's only real submission of the application file (enable_rewrite.py) in the tests of the rewrite: its result
    document arrives whole (read and committed versions, rows written)."""
    # The hook runs `spark-submit` from PATH: the one of this environment's pyspark.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    path = deltalake_table("t", partition_by=["part"], data=pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "small": pa.array([1, None, -1], pa.int8()),
        "part": ["a", "b", "a"]}))
    before = rows_of(path)
    with make_dag(dag_id, params={"jars": delta_spark_jars()}) as dag:
        DeltaEnableIcebergWriterCompatOperator(
            task_id="enable", table_uri=str(path), spark_jars="{{ params.jars }}",
            deltaberg_conn_id=secret_storage_connection,
            spark_conf=submit_conf(),
        )
    result = run_dag(dag)
    assert result.state == "success", result.ti("enable").state
    returned = result.xcom("enable")
    assert returned["action"] == "rewrite" and returned["committed_version"] == 1
    details = returned["details"]  # the application's result document
    assert (details["table"], details["read_version"], details["version"]) == (str(path), 0, 1)
    assert details["rows_written"] == len(before) and details["files_added"] > 0
    assert validate(str(path), data_checks=True).compliant
    after = rows_of(path)
    assert after == before  # the int8 values come back as the same integers
    assert DeltaTable(str(path)).snapshot().schema.field("small").type.name == "integer"
    assert_secret_only_in_private_files(spark_submit_commands, STORAGE_SECRET)
    command = spark_submit_commands[0]["command"]
    assert command[command.index("--level") + 1] == "writer-compat-v1"


@pytest.mark.spark
def test_cluster_deploy_mode_passes_the_storage_options_inline(run_dag: Callable[..., Any], dag_id: str,
                                                                deltalake_table: Callable[..., Path],
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                secret_storage_connection: str,
                                                                spark_submit_commands: list[dict[str, Any]]) -> None:
    """A deploy_mode argument of cluster (the driver runs elsewhere, a local file would not reach it) makes the
    storage options travel as JSON on the command line, as the submitting hook resolves the mode. spark-submit
    then finds no YARN configuration here, and the task fails with nothing committed."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    # The JVM options of the tests' Spark JVMs (the class-data-sharing archive: 5 CPU s without it) reach the local
    # SparkSubmit JVM this way only: in cluster mode the driver's options are for the remote driver.
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", jvm_options())
    for variable in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(variable, raising=False)
    path = deltalake_table("t")
    before = log_bytes(path)
    with make_dag(dag_id) as dag:
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=str(path), mode="rewrite",
                                               deltaberg_conn_id=secret_storage_connection, spark_conn_id="spark_yarn",
                                               spark_submit_kwargs={"deploy_mode": "cluster"})
    result = run_dag(dag)
    assert result.ti("enable").state == "failed"
    assert log_bytes(path) == before
    [built] = spark_submit_commands
    command = built["command"]
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    inline = command[command.index("--storage-options-json") + 1]
    assert json.loads(inline) == {"token": STORAGE_SECRET}
    assert built["files"] == {}
