"""Asset-driven conversion: an AssetWatcher on the Delta table starts a run for each batch of new commits, which
converts them to Iceberg snapshots. Nothing waits in a run or a worker slot meanwhile: the watcher's trigger
(DeltaCommitEventTrigger) polls the Delta log on the triggerer, and each of its events is an asset event that
schedules this DAG (the Airflow 3 way; deltaberg_event_driven.py waits in a deferrable sensor instead).

    commits   the batch the run's asset events reported (table, from_version, to_version, events); {} for a
              manual run
    convert   DeltaToIcebergOperator, in the worker: up to the batch's to_version (the latest for a manual run),
              one Iceberg snapshot per new Delta commit, registered in the catalog; its outlet is the Iceberg
              table's asset, ``iceberg://<CATALOG_NAME>/<namespace>/<table>``: a DAG scheduled on it runs after
              each conversion, its triggering event's extra holding delta_version, snapshot_id, mode,
              files_added and records (docs/lineage.md)

The watcher's cursor is the later of the last version it reported (in the trigger's memory) and the Iceberg
metadata's ``delta-version``, which this DAG's runs move and where a restarted trigger begins: a triggerer restart
loses no batch, and repeats one only when its run had not converted it yet (the repeated run finds it converted);
commits converted by other means meanwhile make no event. Before the first conversion every version is new: the
first event comes at the first poll. Events that arrive while a run is queued or running schedule one run, which
converts them all (max_active_runs=1).

Configuration: environment variables named after the DAG id, DELTABERG_ASSET_WATCHER_<SETTING>, read when the
file is parsed: set them for the dag-processor, the triggerer's DAG bundle and the workers alike. Until TABLE_URI
and IDENTIFIER are set the DAG has no asset schedule and no default table: only a manual run that names one runs
it. It is paused when first seen.

    TABLE_URI = (none)                              the Delta table (local path or fsspec URI)
    IDENTIFIER = (none)                             its Iceberg identifier, namespace.table
    CATALOG = {"type": "sql", "uri": "sqlite:///$AIRFLOW_HOME/deltaberg_catalog.db"}
                                                    pyiceberg catalog properties (JSON) applied over those of the
                                                    connection below; {} by default when that connection is set
    CATALOG_CONN_ID = (none)                        connection whose extra holds pyiceberg catalog properties
    STORAGE_CONN_ID = (none)                        connection with the table's storage credentials (the trigger
                                                    resolves it on the triggerer)
    CATALOG_NAME = deltaberg                        the pyiceberg catalog name
    POLL_SECONDS = 30                               seconds between two looks at the Delta log
    MIN_COMMITS = 1                                 how many new Delta versions make an event
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, Param, task

from airflow_deltaberg.assets import delta_table_uri
from airflow_deltaberg.operators import DeltaToIcebergOperator
from airflow_deltaberg.triggers import DeltaCommitEventTrigger

DAG_ID = "deltaberg_asset_watcher"
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
POLL_SECONDS = float(setting("POLL_SECONDS", "30"))
MIN_COMMITS = int(setting("MIN_COMMITS", "1"))


def required(value: str, description: str) -> Param:
    """A string param whose default is ``value``; without one (not configured) a run must name it."""
    default = {"default": value} if value else {}
    return Param(**default, type="string", minLength=1, description=description)


def watched_table() -> Asset:
    """The Delta table as an asset whose watcher fires on its new commits."""
    trigger = DeltaCommitEventTrigger(table_uri=TABLE_URI, poll_interval=POLL_SECONDS, min_commits=MIN_COMMITS,
                                      deltaberg_conn_id=STORAGE_CONN_ID)
    return Asset(name=f"delta_{IDENTIFIER}", uri=delta_table_uri(TABLE_URI),
                 watchers=[AssetWatcher(name=f"{DAG_ID}_commits", trigger=trigger)])


with DAG(
    dag_id=DAG_ID,
    description="Convert a Delta table's new commits to Iceberg when its asset watcher reports them" + (
        "" if CONFIGURED else f" (not scheduled: set {PREFIX}TABLE_URI and {PREFIX}IDENTIFIER)"),
    schedule=[watched_table()] if CONFIGURED else None,
    is_paused_upon_creation=True,  # whatever the deployment's default: a deployer unpauses it on purpose
    max_active_runs=1,  # each run continues from the previous run's Iceberg snapshot
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

    # multiple_outputs=False: the dict is one XCom (the return annotation would push each key as its own)
    @task(multiple_outputs=False)
    def commits(triggering_asset_events: Any = None) -> dict[str, Any]:
        """The versions this run's asset events reported, merged into one batch ({} when none did)."""
        payloads = [event.extra.get("payload") or {} for events in (triggering_asset_events or {}).values()
                    for event in events if event.extra.get("from_trigger")]
        payloads = [p for p in payloads if "to_version" in p]
        if not payloads:
            return {}
        return {"table": payloads[0]["table"], "from_version": min(p["from_version"] for p in payloads),
                "to_version": max(p["to_version"] for p in payloads), "events": len(payloads),
                "table_id": payloads[-1].get("table_id")}

    batch = commits()
    convert = DeltaToIcebergOperator(
        task_id="convert",
        # Configured, the table is known when the file is parsed: the task declares the Delta table as its inlet
        # and the Iceberg table as its outlet (graphs and the Assets page show them; DAGs can schedule on it).
        table_uri=TABLE_URI or "{{ params.table_uri }}",
        identifier=IDENTIFIER or "{{ params.identifier }}",
        catalog_config="{{ params.catalog }}",
        catalog_conn_id=CATALOG_CONN_ID,
        catalog_name=CATALOG_NAME,
        version="{{ ti.xcom_pull(task_ids='commits').get('to_version') }}",
        deltaberg_conn_id=STORAGE_CONN_ID,
    )
    batch >> convert
