"""Event-driven regeneration: wait for new commits of a Delta table, regenerate its Iceberg metadata with Spark, and
check that an Iceberg reader sees as many rows as a Delta reader.

    wait_for_commits  DeltaCommitSensor, deferrable: waits on the triggerer (no worker slot) until the table has
                      versions newer than the ``delta-version`` recorded in its Iceberg metadata (every version is
                      new before the first conversion)
    regenerate        DeltaIcebergRegenerateOperator: spark-submit of the PySpark application shipped in
                      airflow-deltaberg, up to the sensor's ``to_version`` (full the first time, then one Iceberg
                      snapshot per new Delta commit), registered in the catalog
    check_row_counts  reads the Iceberg table back with pyiceberg and counts Delta's rows with deltalake at the
                      Delta version the Iceberg snapshot was made from; fails on a mismatch, or when the Iceberg
                      table is behind the version the sensor reported

Runs back to back (``@continuous``, one run at a time): each run waits for the next commits, so the Iceberg
metadata follows the Delta table within about a poke interval plus the Spark job. A wait longer than
WAIT_HOURS (below) fails the run (a table that stopped receiving commits is worth a look); the next run starts
waiting again.

The check scans the whole table (one column with pyiceberg, a count(*) with deltalake's DataFusion): fine for small
and medium tables; for big ones compare the snapshot summaries' ``total-records`` instead. It needs ``deltalake``
on the worker (``pip install deltalake``) and, for object stores, deltalake's own storage options.

Configuration: environment variables named after the DAG id, DELTABERG_EVENT_DRIVEN_REGENERATION_<SETTING>, read
when the file is parsed: set them for the dag-processor and the workers alike (a worker parses the file again to
run a task). A copy of this file under another DAG_ID reads its own. TABLE_URI, IDENTIFIER and CATALOG are the
defaults of the DAG params, which a manual run can override (Trigger DAG w/ config, or
``dag.test(run_conf=...)``). Until TABLE_URI and IDENTIFIER are set the DAG has no schedule and no default table:
it acts on no table nobody chose, and only a manual run that names one runs it. It is paused when first seen.

    TABLE_URI = (none)                              the Delta table (local path or fsspec URI)
    IDENTIFIER = (none)                             its Iceberg identifier, namespace.table
    CATALOG = {"type": "sql", "uri": "sqlite:///$AIRFLOW_HOME/deltaberg_catalog.db"}
                                                    pyiceberg catalog properties (JSON) applied over those of the
                                                    connection below; {} by default when that connection is set
    CATALOG_CONN_ID = (none)                        connection whose extra holds pyiceberg catalog properties:
                                                    secrets belong there (rendered params are shown in the UI)
    STORAGE_CONN_ID = (none)                        connection with the table's storage credentials
    CATALOG_NAME = deltaberg                        the pyiceberg catalog name
    SPARK_CONN_ID = spark_default                   the Spark connection of spark-submit
    SPARK_CONF = {}                                 Spark configuration (JSON), e.g. {"spark.executor.memory": "4g"}
    MIN_COMMITS = 1                                 how many new Delta versions start a regeneration
    POKE_SECONDS = 60                               seconds between two looks at the Delta log
    WAIT_HOURS = 24                                 how long a run waits for commits before it fails
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_deltaberg.hooks.catalog import IcebergCatalogHook
from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator
from airflow_deltaberg.sensors import DeltaCommitSensor

DAG_ID = "deltaberg_event_driven_regeneration"
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
SPARK_CONN_ID = setting("SPARK_CONN_ID", "spark_default")
SPARK_CONF = json.loads(setting("SPARK_CONF", "{}"))
MIN_COMMITS = int(setting("MIN_COMMITS", "1"))
POKE_SECONDS = float(setting("POKE_SECONDS", "60"))
WAIT_HOURS = float(setting("WAIT_HOURS", "24"))


def required(value: str, description: str) -> Param:
    """A string param whose default is ``value``; without one (not configured) a run must name it."""
    default = {"default": value} if value else {}
    return Param(**default, type="string", minLength=1, description=description)


log = logging.getLogger(__name__)


def count_iceberg_rows(table: Any) -> int:
    """Rows of the Iceberg table's current snapshot, read with pyiceberg (one column: the count is what matters)."""
    first_column = table.schema().fields[0].name
    batches = table.scan(selected_fields=(first_column,)).to_arrow_batch_reader()
    return sum(batch.num_rows for batch in batches)


def count_delta_rows(table_uri: str, version: int) -> int:
    """Rows of the Delta table at ``version``, counted by deltalake (DataFusion applies deletion vectors)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    delta = DeltaTable(table_uri, version=version)
    result = pa.table(QueryBuilder().register("delta_table", delta).execute("SELECT count(*) AS n FROM delta_table"))
    return int(result.column("n")[0].as_py())


with DAG(
    dag_id=DAG_ID,
    description="Regenerate the Iceberg metadata of a Delta table with Spark after each new commit" + (
        "" if CONFIGURED else f" (not scheduled: set {PREFIX}TABLE_URI and {PREFIX}IDENTIFIER)"),
    schedule="@continuous" if CONFIGURED else None,
    is_paused_upon_creation=True,  # whatever the deployment's default: a deployer unpauses it on purpose
    max_active_runs=1,  # @continuous needs it; two regenerations of one table must not race anyway
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={
        "table_uri": required(TABLE_URI, "the Delta table location"),
        "identifier": required(IDENTIFIER, "the Iceberg identifier, namespace.table"),
        "catalog": Param(CATALOG, type="object", description="pyiceberg catalog properties (no secrets here)"),
    },
    render_template_as_native_obj=True,  # "{{ params.catalog }}" renders to the dict, not its text
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=1)},
    tags=["deltaberg", "example"],
) as dag:
    wait_for_commits = DeltaCommitSensor(
        task_id="wait_for_commits",
        table_uri="{{ params.table_uri }}",
        start_from="iceberg",
        min_commits=MIN_COMMITS,
        deltaberg_conn_id=STORAGE_CONN_ID,
        deferrable=True,
        poke_interval=POKE_SECONDS,
        timeout=WAIT_HOURS * 3600,
    )

    regenerate = DeltaIcebergRegenerateOperator(
        task_id="regenerate",
        table_uri="{{ params.table_uri }}",
        version_range=wait_for_commits.output,
        identifier="{{ params.identifier }}",
        catalog_config="{{ params.catalog }}",
        catalog_conn_id=CATALOG_CONN_ID,
        catalog_name=CATALOG_NAME,
        deltaberg_conn_id=STORAGE_CONN_ID,
        conn_id=SPARK_CONN_ID,
        conf=SPARK_CONF,
    )

    # retries=0: a mismatch does not go away by reading again; multiple_outputs=False: the dict is one XCom (the
    # return annotation would otherwise push each key as an XCom of its own)
    @task(retries=0, multiple_outputs=False)
    def check_row_counts(commits: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Iceberg rows (pyiceberg) == Delta rows (deltalake) at the Delta version of the Iceberg snapshot."""
        from pyiceberg.catalog import load_catalog

        assert params is not None
        properties = IcebergCatalogHook(catalog_conn_id=CATALOG_CONN_ID).catalog_properties(params["catalog"])
        iceberg = load_catalog(CATALOG_NAME, **properties).load_table(params["identifier"])
        snapshot = iceberg.current_snapshot()
        recorded = None if snapshot is None or snapshot.summary is None else snapshot.summary.get("delta-version")
        if recorded is None:
            raise AirflowFailException(f"Iceberg table {params['identifier']} ({iceberg.metadata_location}) has no "
                                       f"snapshot made from a Delta version")
        version = int(recorded)
        if version < commits["to_version"]:
            raise AirflowFailException(
                f"Iceberg table {params['identifier']} is behind: its current snapshot {snapshot.snapshot_id} holds "
                f"Delta version {version} of {params['table_uri']}, this run was to reach {commits['to_version']}")
        iceberg_rows = count_iceberg_rows(iceberg)
        delta_rows = count_delta_rows(params["table_uri"], version)
        counts = {"identifier": params["identifier"], "snapshot_id": snapshot.snapshot_id, "delta_version": version,
                  "iceberg_rows": iceberg_rows, "delta_rows": delta_rows}
        if iceberg_rows != delta_rows:
            raise AirflowFailException(
                f"row count mismatch: Iceberg table {params['identifier']} (snapshot {snapshot.snapshot_id}) has "
                f"{iceberg_rows} rows, Delta table {params['table_uri']} has {delta_rows} at version {version}")
        log.info("Iceberg and Delta agree: %d rows at Delta version %d", iceberg_rows, version)
        return counts

    regenerate >> check_row_counts(wait_for_commits.output)
