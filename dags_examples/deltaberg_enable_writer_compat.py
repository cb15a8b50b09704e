"""Enablement: turn IcebergWriterCompatV1 on for a Delta table, rewriting its data files with Spark when needed,
then check the result. Triggered by hand (no schedule).

    plan      DeltaEnableIcebergWriterCompatOperator, dry run: what must change (protocol, properties, column
              mapping ids, ``col-<id>`` physical names, materialized partition values), whether the data files
              must be rewritten and why, and what blocks the enable; XCom ``enable_plan``. Writes nothing.
    enable    the same operator for real: one metadata commit when no data must change, otherwise a PySpark
              application (shipped in airflow-deltaberg) submitted through SparkSubmit rewrites every live data
              file and commits the switch in one commit; refused when another writer committed meanwhile, or when
              the plan has blockers (the task then fails without retries)
    validate  DeltaValidateOperator at writer-compat-v1 with data checks: Parquet field ids, physical names and
              partition values in the rewritten files; fails when the table is not compliant

The ``mode`` param picks how: ``auto`` (metadata only when possible, else the rewrite), ``metadata_only`` (fails
when the data must be rewritten) or ``rewrite`` (always). The rewrite reads the table with Delta on Spark: Spark
needs the delta-spark and delta-storage jars (SPARK_JARS, or SPARK_PACKAGES resolved by
spark-submit from Maven Central), and the Spark driver and executors need airflow-deltaberg installed.

Configuration: environment variables named after the DAG id, DELTABERG_ENABLE_WRITER_COMPAT_<SETTING>, read when
the file is parsed: set them for the dag-processor and the workers alike (a worker parses the file again to run a
task). A copy of this file under another DAG_ID reads its own. TABLE_URI and ENABLE_MODE are the defaults of the
DAG params, which a run can override (Trigger DAG w/ config, or ``dag.test(run_conf=...)``); without TABLE_URI a
run must name its table.

    TABLE_URI = (none)                              the Delta table (local path or fsspec URI)
    ENABLE_MODE = auto                              auto, metadata_only or rewrite
    STORAGE_CONN_ID = (none)                        connection with the table's storage credentials
    SPARK_CONN_ID = spark_default                   the Spark connection of spark-submit
    SPARK_CONF = {}                                 Spark configuration (JSON)
    SPARK_JARS = (none)                             comma-separated jar paths: delta-spark and delta-storage
    SPARK_PACKAGES = io.delta:delta-spark_4.1_2.13:4.4.0
                                                    Maven coordinates spark-submit resolves, when no jars are given
"""

from __future__ import annotations

import datetime as dt
import json
import os

from airflow.sdk import DAG, Param

from airflow_deltaberg.operators import DeltaEnableIcebergWriterCompatOperator, DeltaValidateOperator

DAG_ID = "deltaberg_enable_writer_compat"
#: This DAG's settings: the environment variables PREFIX + <SETTING>.
PREFIX = DAG_ID.upper() + "_"


def setting(name: str, default: str = "") -> str:
    """The environment variable ``PREFIX + name``; ``default`` when it is unset or blank."""
    return os.environ.get(PREFIX + name, "").strip() or default


TABLE_URI = setting("TABLE_URI")
ENABLE_MODE = setting("ENABLE_MODE", "auto")
STORAGE_CONN_ID = setting("STORAGE_CONN_ID") or None
SPARK_CONN_ID = setting("SPARK_CONN_ID", "spark_default")
SPARK_CONF = json.loads(setting("SPARK_CONF", "{}"))
SPARK_JARS = setting("SPARK_JARS") or None
# Delta 4.4 for Spark 4.1 (Scala 2.13): match the Spark of the cluster. Ignored when jars are given.
SPARK_PACKAGES = None if SPARK_JARS else setting("SPARK_PACKAGES", "io.delta:delta-spark_4.1_2.13:4.4.0")

with DAG(
    dag_id=DAG_ID,
    description="Enable IcebergWriterCompatV1 on a Delta table (data rewrite through SparkSubmit), then validate",
    schedule=None,
    max_active_runs=1,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={
        "table_uri": Param(**({"default": TABLE_URI} if TABLE_URI else {}), type="string", minLength=1,
                           description="the Delta table location"),
        "mode": Param(ENABLE_MODE, type="string", enum=["auto", "metadata_only", "rewrite"],
                      description="auto: metadata only when possible, else rewrite the data files"),
    },
    tags=["deltaberg", "example"],
) as dag:
    plan = DeltaEnableIcebergWriterCompatOperator(
        task_id="plan",
        table_uri="{{ params.table_uri }}",
        mode="{{ params.mode }}",
        dry_run=True,
        deltaberg_conn_id=STORAGE_CONN_ID,
    )

    enable = DeltaEnableIcebergWriterCompatOperator(
        task_id="enable",
        table_uri="{{ params.table_uri }}",
        mode="{{ params.mode }}",
        deltaberg_conn_id=STORAGE_CONN_ID,
        spark_conn_id=SPARK_CONN_ID,
        spark_conf=SPARK_CONF,
        spark_jars=SPARK_JARS,
        spark_packages=SPARK_PACKAGES,
        retries=1,  # a concurrent commit fails the try; the retry plans again on the new version
        retry_delay=dt.timedelta(minutes=1),
    )

    validate = DeltaValidateOperator(
        task_id="validate",
        table_uri="{{ params.table_uri }}",
        level="writer-compat-v1",
        data_checks=True,
        deltaberg_conn_id=STORAGE_CONN_ID,
    )

    plan >> enable >> validate
