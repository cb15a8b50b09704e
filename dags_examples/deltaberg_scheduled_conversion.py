"""Scheduled conversion: validate a Delta table, then bring its Iceberg metadata up to date, on a schedule.

    validate  DeltaValidateOperator: the table against an IcebergCompat level; the report goes to XCom
              (``compliance_report``) and the task log
    convert   DeltaToIcebergOperator, in the worker: the first run writes a full Iceberg snapshot, later runs one
              snapshot per Delta commit since the last run (nothing when the table did not change); registered in
              the catalog; Iceberg snapshots older than DELTABERG_SNAPSHOT_RETENTION_DAYS are expired

Validation is informational by default. A table written by plain Delta writers (deltalake, Delta on Spark without
the IcebergCompat table features) breaks every level's rules, yet converts to an Iceberg table that returns the
rows Delta returns: the converter refuses, by itself, whatever it cannot convert faithfully. The levels tell
whether Delta writers keep the table Iceberg-compatible. Set DELTABERG_REQUIRE_COMPLIANCE=true to stop before
converting when the table breaks a rule (for tables meant to stay compliant, e.g. after the enablement example).

The conversion runs in the worker: incremental runs take well under a second, a full conversion of a million
live files took about 100 s and 4 GB in benchmarks/. For bigger tables, regenerate with Spark instead
(DeltaIcebergRegenerateOperator, see deltaberg_event_driven.py).

Configuration: environment variables read when the file is parsed. The first three are the defaults of the DAG
params, which a manual run can override (Trigger DAG w/ config, or ``dag.test(run_conf=...)``). Copy this file
and change the defaults below to make it yours.

    DELTABERG_TABLE_URI = /data/delta/sales         the Delta table (local path or fsspec URI)
    DELTABERG_IDENTIFIER = lake.sales               its Iceberg identifier, namespace.table
    DELTABERG_CATALOG = {"type": "sql", "uri": "sqlite:///$AIRFLOW_HOME/deltaberg_catalog.db"}
                                                    pyiceberg catalog properties (JSON) applied over those of the
                                                    connection below; {} by default when that connection is set
    DELTABERG_CATALOG_CONN_ID = (none)              connection whose extra holds pyiceberg catalog properties:
                                                    secrets belong there (rendered params are shown in the UI)
    DELTABERG_STORAGE_CONN_ID = (none)              connection with the table's storage credentials
    DELTABERG_CATALOG_NAME = deltaberg              the pyiceberg catalog name
    DELTABERG_CONVERT_SCHEDULE = @hourly            cron expression or preset
    DELTABERG_VALIDATION_LEVEL = writer-compat-v1   compat-v1, compat-v2 or writer-compat-v1
    DELTABERG_REQUIRE_COMPLIANCE = false            true: a violation fails the run before the conversion
    DELTABERG_SNAPSHOT_RETENTION_DAYS = 7           expire older Iceberg snapshots (metadata files only)
"""

from __future__ import annotations

import datetime as dt
import json
import os

from airflow.sdk import DAG, Param

from airflow_deltaberg.operators import DeltaToIcebergOperator, DeltaValidateOperator

AIRFLOW_HOME = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
TABLE_URI = os.environ.get("DELTABERG_TABLE_URI", "/data/delta/sales")
IDENTIFIER = os.environ.get("DELTABERG_IDENTIFIER", "lake.sales")
CATALOG_CONN_ID = os.environ.get("DELTABERG_CATALOG_CONN_ID") or None
CATALOG = json.loads(os.environ.get("DELTABERG_CATALOG") or "null") or (
    {} if CATALOG_CONN_ID else {"type": "sql", "uri": f"sqlite:///{AIRFLOW_HOME}/deltaberg_catalog.db"})
STORAGE_CONN_ID = os.environ.get("DELTABERG_STORAGE_CONN_ID") or None
CATALOG_NAME = os.environ.get("DELTABERG_CATALOG_NAME", "deltaberg")
SCHEDULE = os.environ.get("DELTABERG_CONVERT_SCHEDULE", "@hourly")
VALIDATION_LEVEL = os.environ.get("DELTABERG_VALIDATION_LEVEL", "writer-compat-v1")
REQUIRE_COMPLIANCE = os.environ.get("DELTABERG_REQUIRE_COMPLIANCE", "false").strip().lower() in ("1", "true", "yes")
SNAPSHOT_RETENTION = dt.timedelta(days=float(os.environ.get("DELTABERG_SNAPSHOT_RETENTION_DAYS", "7")))

with DAG(
    dag_id="deltaberg_scheduled_conversion",
    description="Validate a Delta table and convert its new commits to Iceberg snapshots",
    schedule=SCHEDULE,
    max_active_runs=1,  # each run continues from the previous run's Iceberg snapshot
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,  # one run converts every commit since the last one: skipped intervals lose nothing
    params={
        "table_uri": Param(TABLE_URI, type="string", description="the Delta table location"),
        "identifier": Param(IDENTIFIER, type="string", description="the Iceberg identifier, namespace.table"),
        "catalog": Param(CATALOG, type="object", description="pyiceberg catalog properties (no secrets here)"),
    },
    render_template_as_native_obj=True,  # "{{ params.catalog }}" renders to the dict, not its text
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=2)},
    tags=["deltaberg", "example"],
) as dag:
    validate = DeltaValidateOperator(
        task_id="validate",
        table_uri="{{ params.table_uri }}",
        level=VALIDATION_LEVEL,
        deltaberg_conn_id=STORAGE_CONN_ID,
        fail_on_violation=REQUIRE_COMPLIANCE,
    )

    convert = DeltaToIcebergOperator(
        task_id="convert",
        table_uri="{{ params.table_uri }}",
        identifier="{{ params.identifier }}",
        catalog_config="{{ params.catalog }}",
        catalog_conn_id=CATALOG_CONN_ID,
        catalog_name=CATALOG_NAME,
        max_snapshot_age=SNAPSHOT_RETENTION,
        deltaberg_conn_id=STORAGE_CONN_ID,
    )

    validate >> convert
