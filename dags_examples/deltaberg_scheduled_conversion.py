"""Scheduled conversion: validate a Delta table, then bring its Iceberg metadata up to date, on a schedule.

    validate  DeltaValidateOperator: the table against an IcebergCompat level; the report goes to XCom
              (``compliance_report``) and the task log
    convert   DeltaToIcebergOperator, in the worker: the first run writes a full Iceberg snapshot, later runs one
              snapshot per Delta commit since the last run (nothing when the table did not change); registered in
              the catalog; Iceberg snapshots older than SNAPSHOT_RETENTION_DAYS (below) are expired

Validation is informational by default. A table written by plain Delta writers (deltalake, Delta on Spark without
the IcebergCompat table features) breaks every level's rules, yet converts to an Iceberg table that returns the
rows Delta returns: the converter refuses, by itself, whatever it cannot convert faithfully. The levels tell
whether Delta writers keep the table Iceberg-compatible. Set REQUIRE_COMPLIANCE (below) to true to stop before
converting when the table breaks a rule (for tables meant to stay compliant, e.g. after the enablement example).

The conversion runs in the worker: incremental runs take well under a second, a full conversion of a million
live files took about 100 s and 4 GB in benchmarks/. For bigger tables, regenerate with Spark instead
(DeltaIcebergRegenerateOperator, see deltaberg_event_driven.py).

Configuration: environment variables named after the DAG id, DELTABERG_SCHEDULED_CONVERSION_<SETTING>, read when
the file is parsed: set them for the dag-processor and the workers alike (a worker parses the file again to run a
task). A copy of this file under another DAG_ID reads its own. TABLE_URI, IDENTIFIER and CATALOG are the defaults
of the DAG params, which a manual run can override (Trigger DAG w/ config, or ``dag.test(run_conf=...)``). Until
TABLE_URI and IDENTIFIER are set the DAG has no schedule and no default table: it converts no table nobody chose,
and only a manual run that names one runs it. It is paused when first seen.

    TABLE_URI = (none)                              the Delta table (local path or fsspec URI)
    IDENTIFIER = (none)                             its Iceberg identifier, namespace.table
    CATALOG = {"type": "sql", "uri": "sqlite:///$AIRFLOW_HOME/deltaberg_catalog.db"}
                                                    pyiceberg catalog properties (JSON) applied over those of the
                                                    connection below; {} by default when that connection is set
    CATALOG_CONN_ID = (none)                        connection whose extra holds pyiceberg catalog properties:
                                                    secrets belong there (rendered params are shown in the UI)
    STORAGE_CONN_ID = (none)                        connection with the table's storage credentials
    CATALOG_NAME = deltaberg                        the pyiceberg catalog name
    SCHEDULE = @hourly                              cron expression or preset
    VALIDATION_LEVEL = writer-compat-v1             compat-v1, compat-v2 or writer-compat-v1
    REQUIRE_COMPLIANCE = false                      true: a violation fails the run before the conversion
    SNAPSHOT_RETENTION_DAYS = 7                     expire older Iceberg snapshots (metadata files only)
"""

from __future__ import annotations

import datetime as dt
import json
import os

from airflow.sdk import DAG, Param

from airflow_deltaberg.operators import DeltaToIcebergOperator, DeltaValidateOperator

DAG_ID = "deltaberg_scheduled_conversion"
#: This DAG's settings: the environment variables PREFIX + <SETTING>.
PREFIX = DAG_ID.upper() + "_"


def setting(name: str, default: str = "") -> str:
    """The environment variable ``PREFIX + name``; ``default`` when it is unset or blank."""
    return os.environ.get(PREFIX + name, "").strip() or default


AIRFLOW_HOME = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
TABLE_URI = setting("TABLE_URI")
IDENTIFIER = setting("IDENTIFIER")
CONFIGURED = bool(TABLE_URI and IDENTIFIER)
CATALOG_CONN_ID = setting("CATALOG_CONN_ID") or None
CATALOG = json.loads(setting("CATALOG", "null")) or (
    {} if CATALOG_CONN_ID else {"type": "sql", "uri": f"sqlite:///{AIRFLOW_HOME}/deltaberg_catalog.db"})
STORAGE_CONN_ID = setting("STORAGE_CONN_ID") or None
CATALOG_NAME = setting("CATALOG_NAME", "deltaberg")
SCHEDULE = setting("SCHEDULE", "@hourly")
VALIDATION_LEVEL = setting("VALIDATION_LEVEL", "writer-compat-v1")
REQUIRE_COMPLIANCE = setting("REQUIRE_COMPLIANCE", "false").lower() in ("1", "true", "yes")
SNAPSHOT_RETENTION = dt.timedelta(days=float(setting("SNAPSHOT_RETENTION_DAYS", "7")))


def required(value: str, description: str) -> Param:
    """A string param whose default is ``value``; without one (not configured) a run must name it."""
    default = {"default": value} if value else {}
    return Param(**default, type="string", minLength=1, description=description)


with DAG(
    dag_id=DAG_ID,
    description="Validate a Delta table and convert its new commits to Iceberg snapshots" + (
        "" if CONFIGURED else f" (not scheduled: set {PREFIX}TABLE_URI and {PREFIX}IDENTIFIER)"),
    schedule=SCHEDULE if CONFIGURED else None,
    is_paused_upon_creation=True,  # whatever the deployment's default: a deployer unpauses it on purpose
    max_active_runs=1,  # each run continues from the previous run's Iceberg snapshot
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,  # one run converts every commit since the last one: skipped intervals lose nothing
    params={
        "table_uri": required(TABLE_URI, "the Delta table location"),
        "identifier": required(IDENTIFIER, "the Iceberg identifier, namespace.table"),
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
