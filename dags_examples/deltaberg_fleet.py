"""A fleet of Delta tables in one DAG: find the tables, validate and convert each in its own mapped task, then one
report for all of them.

    discover  the tables: folders holding _delta_log under TABLES_PREFIX (MAX_DEPTH levels, at most MAX_TABLES:
              more is refused, never cut), or the locations of TABLES_FILE, or of the Airflow Variable
              TABLES_VARIABLE (one location a line, or a JSON list of locations or {"name", "uri"} objects)
    validate  DeltaValidateOperator mapped over the tables (informational: a violation does not fail it)
    convert   DeltaToIcebergOperator mapped over the tables, registered as <NAMESPACE>.<table name>;
              trigger_rule all_done: a table whose validation failed does not hold back the others
    report    trigger_rule all_done: per table level, compliance and rule counts, Delta version vs the Iceberg
              delta-version (lag), last conversion, rows; written as <REPORT_DIR>/<dag id>/<run id>.html (a chart
              of compliance and lag drawn as inline SVG: renders with no network) and sent by
              ComplianceEmailNotifier / ComplianceWebhookNotifier (their connections are checked before either
              sends). Its XCom is the report as a dict, with the page's path under "html".

Each mapped task is named by its table (map_index_template); one table's failure fails only its map indexes,
the report lists it as failed. The run succeeds when the report was delivered.

Configuration: environment variables DELTABERG_FLEET_<SETTING>, read when the file is parsed (set them for the
dag-processor and the workers alike). Until one of TABLES_PREFIX, TABLES_FILE or TABLES_VARIABLE is set the DAG has
no schedule; a manual run names its source in the params. It is paused when first seen.

    TABLES_PREFIX = (none)           storage prefix whose folders are searched for Delta tables
    TABLES_FILE = (none)             a file listing the tables
    TABLES_VARIABLE = (none)         an Airflow Variable listing the tables
    MAX_DEPTH = 3, MAX_TABLES = 500  bounds of the prefix search
    STORAGE_CONN_ID = (none)         connection with the storage credentials of the prefix and the tables
    SCHEDULE = @daily
    VALIDATION_LEVEL = writer-compat-v1
    CATALOG = {"type": "sql", "uri": "sqlite:///$AIRFLOW_HOME/deltaberg_catalog.db"}  (no secrets here)
    CATALOG_CONN_ID = (none)         connection whose extra holds the catalog properties (instead of CATALOG)
    NAMESPACE = lake                 catalog namespace of the tables
    REPORT_DIR = $AIRFLOW_HOME/deltaberg_fleet_reports
    ALERT_EMAIL = (none)             recipients of the report, comma-separated (none: no email)
    SMTP_CONN_ID = smtp_default
    WEBHOOK_CONN_ID = (none)         http connection the report is POSTed to (none: no webhook)
    WEBHOOK_ENDPOINT = (none)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_deltaberg.operators import DeltaToIcebergOperator, DeltaValidateOperator

DAG_ID = "deltaberg_fleet"
PREFIX = DAG_ID.upper() + "_"


def setting(name: str, default: str = "") -> str:
    """The environment variable ``PREFIX + name``; ``default`` when it is unset or blank."""
    return os.environ.get(PREFIX + name, "").strip() or default


AIRFLOW_HOME = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
SOURCES = {"prefix": setting("TABLES_PREFIX"), "file": setting("TABLES_FILE"), "variable": setting("TABLES_VARIABLE")}
CONFIGURED = any(SOURCES.values())
MAX_DEPTH = int(setting("MAX_DEPTH", "3"))
MAX_TABLES = int(setting("MAX_TABLES", "500"))
STORAGE_CONN_ID = setting("STORAGE_CONN_ID") or None
SCHEDULE = setting("SCHEDULE", "@daily")
VALIDATION_LEVEL = setting("VALIDATION_LEVEL", "writer-compat-v1")
CATALOG_CONN_ID = setting("CATALOG_CONN_ID") or None
CATALOG = json.loads(setting("CATALOG", "null")) or (
    {} if CATALOG_CONN_ID else {"type": "sql", "uri": f"sqlite:///{AIRFLOW_HOME}/deltaberg_catalog.db"})
NAMESPACE = setting("NAMESPACE", "lake")
REPORT_DIR = setting("REPORT_DIR", os.path.join(AIRFLOW_HOME, "deltaberg_fleet_reports"))
ALERT_EMAIL = [a.strip() for a in setting("ALERT_EMAIL").split(",") if a.strip()]
SMTP_CONN_ID = setting("SMTP_CONN_ID", "smtp_default")
WEBHOOK_CONN_ID = setting("WEBHOOK_CONN_ID")
WEBHOOK_ENDPOINT = setting("WEBHOOK_ENDPOINT")


def notifiers() -> list[Any]:
    """The report's notifiers, as configured."""
    from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier

    found: list[Any] = []
    if ALERT_EMAIL:
        found.append(ComplianceEmailNotifier(to=ALERT_EMAIL, smtp_conn_id=SMTP_CONN_ID,
                                             subject="[deltaberg] {{ ti.dag_id }}: {{ compliance_summary }}"))
    if WEBHOOK_CONN_ID:
        found.append(ComplianceWebhookNotifier(http_conn_id=WEBHOOK_CONN_ID, endpoint=WEBHOOK_ENDPOINT))
    return found


def _uri(table: dict[str, str]) -> str:
    return table["uri"]


def _convert_kwargs(table: dict[str, str]) -> dict[str, str]:
    return {"table_uri": table["uri"], "identifier": table["identifier"]}


with DAG(
    dag_id=DAG_ID,
    description="Validate and convert every Delta table of a fleet; one report with compliance and lag" + (
        "" if CONFIGURED else f" (not scheduled: set {PREFIX}TABLES_PREFIX, _TABLES_FILE or _TABLES_VARIABLE)"),
    schedule=SCHEDULE if CONFIGURED else None,
    is_paused_upon_creation=True,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={
        "tables_prefix": Param(SOURCES["prefix"], type="string", description="storage prefix to search"),
        "tables_file": Param(SOURCES["file"], type="string", description="file listing the tables"),
        "tables_variable": Param(SOURCES["variable"], type="string", description="Variable listing the tables"),
    },
    tags=["deltaberg", "example"],
) as dag:

    @task
    def discover(params: dict[str, Any]) -> list[dict[str, str]]:
        """The fleet's tables, from the one source the params name."""
        from airflow_deltaberg.core.errors import FleetDiscoveryError
        from airflow_deltaberg.core.fleet import discover_prefix, parse_table_list
        from airflow_deltaberg.hooks.storage import DeltaStorageHook

        given = {k: (params.get(f"tables_{k}") or "").strip() for k in ("prefix", "file", "variable")}
        chosen = [k for k, v in given.items() if v]
        if len(chosen) != 1:
            raise FleetDiscoveryError(f"name exactly one source of tables (tables_prefix, tables_file or "
                                      f"tables_variable); given: {', '.join(chosen) or 'none'}")
        if given["prefix"]:
            options = DeltaStorageHook(deltaberg_conn_id=STORAGE_CONN_ID).storage_options()
            tables = discover_prefix(given["prefix"], options, max_depth=MAX_DEPTH, max_tables=MAX_TABLES)
        elif given["file"]:
            text = Path(given["file"]).read_text(encoding="utf-8")
            tables = parse_table_list(text, source=f"list file {given['file']}", max_tables=MAX_TABLES)
        else:
            from airflow.sdk import Variable

            text = Variable.get(given["variable"])
            tables = parse_table_list(text, source=f"Variable {given['variable']}", max_tables=MAX_TABLES)
        return [{"name": t.name, "uri": t.uri, "identifier": t.identifier(NAMESPACE)} for t in tables]

    tables = discover()

    validated = DeltaValidateOperator.partial(
        task_id="validate", level=VALIDATION_LEVEL, fail_on_violation=False, deltaberg_conn_id=STORAGE_CONN_ID,
        map_index_template="{{ task.table_uri }}",
    ).expand(table_uri=tables.map(_uri))

    converted = DeltaToIcebergOperator.partial(
        task_id="convert", catalog_config=CATALOG, catalog_conn_id=CATALOG_CONN_ID,
        deltaberg_conn_id=STORAGE_CONN_ID, trigger_rule="all_done", map_index_template="{{ task.table_uri }}",
    ).expand_kwargs(tables.map(_convert_kwargs))

    @task(trigger_rule="all_done")
    def report(tables: list[dict[str, str]], **context: Any) -> dict[str, Any]:
        """The fleet report: written as HTML, then delivered by the notifiers (all checked before any sends)."""
        from airflow_deltaberg.core.fleet import FleetTable, fleet_report, fleet_row
        from airflow_deltaberg.core.fleet_html import report_html
        from airflow_deltaberg.hooks.storage import DeltaStorageHook
        from airflow_deltaberg.notifications.compliance import FLEET_KEY

        ti = context["ti"]
        options = DeltaStorageHook(deltaberg_conn_id=STORAGE_CONN_ID).storage_options()
        rows = []
        for index, table in enumerate(tables):
            checked = ti.xcom_pull(task_ids="validate", key="compliance_report", map_indexes=index)
            done = ti.xcom_pull(task_ids="convert", map_indexes=index)
            failed = [f"{name} failed (see its map index {index})" for name, value in
                      (("validate", checked), ("convert", done)) if value is None]
            rows.append(fleet_row(FleetTable(table["name"], table["uri"]), checked, "; ".join(failed) or None,
                                  options))
        fleet = fleet_report(rows)
        folder = Path(REPORT_DIR) / ti.dag_id
        folder.mkdir(parents=True, exist_ok=True)
        page = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", ti.run_id) + ".html")
        page.write_text(report_html(fleet), encoding="utf-8")
        senders = notifiers()
        for sender in senders:
            sender.check_connection()
        for sender in senders:
            sender.notify({**context, FLEET_KEY: fleet})
        return {**fleet.to_dict(), "html": str(page)}

    [validated, converted] >> report(tables)
    validated >> converted
