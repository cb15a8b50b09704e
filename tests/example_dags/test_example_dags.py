"""The example DAGs of dags_examples/ as a user runs them: loaded by a DagBag with their configuration from
environment variables, then run with ``dag.test()`` against local tables written by real writers, the SQLite
catalog, local SMTP and HTTP servers, and ``spark_default`` = local[*] (support.environment). Outcomes are read back:
Iceberg rows with pyiceberg, Delta rows with deltalake, task states, XComs, mail and webhook requests received.

Two tests submit Spark jobs (marked ``spark``): the event-driven DAG (one incremental regeneration) and the
enablement DAG (one data rewrite)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.catalog import load_catalog
from support import compat_tables as ct
from support.environment import REPO_ROOT
from support.spark_session import delta_spark_jars, java, submit_conf

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.iceberg.convert import convert

DAGS_DIR = REPO_ROOT / "dags_examples"
EXAMPLES = {
    "deltaberg_scheduled_conversion": "deltaberg_scheduled_conversion.py",
    "deltaberg_event_driven_regeneration": "deltaberg_event_driven.py",
    "deltaberg_compliance_monitoring": "deltaberg_compliance_monitoring.py",
    "deltaberg_enable_writer_compat": "deltaberg_enable_writer_compat.py",
    "deltaberg_asset_watcher": "deltaberg_asset_watcher.py",
    "deltaberg_fleet": "deltaberg_fleet.py",  # its own tests: test_fleet_dag.py (no table_uri: a fleet)
}
#: The examples about one table (a ``table_uri`` param).
ONE_TABLE = sorted(set(EXAMPLES) - {"deltaberg_fleet"})


def dag_bag(folder: Path | str = DAGS_DIR) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(folder))


def settings_env(dag_id: str, **settings: str) -> dict[str, str]:
    """The environment variables of an example DAG's settings: ``TABLE_URI`` -> ``<DAG_ID>_TABLE_URI``."""
    return {f"{dag_id.upper()}_{name}": value for name, value in settings.items()}


@pytest.fixture
def load_example(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``load_example(dag_id, **settings)``: the example DAG as a DagBag parses it with its settings
    (``TABLE_URI="/t"`` sets ``<DAG_ID>_TABLE_URI``) in the environment."""

    def _load(dag_id: str, **settings: str) -> Any:
        for name, value in settings_env(dag_id, **settings).items():
            monkeypatch.setenv(name, value)
        bag = dag_bag(DAGS_DIR / EXAMPLES[dag_id])
        assert bag.import_errors == {}
        dag = bag.dags.get(dag_id)
        assert dag is not None, f"{EXAMPLES[dag_id]} defines no DAG {dag_id}"
        return dag

    return _load


def sales(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"order_id": pa.array(ids, pa.int64()), "amount": pa.array([i * 1.5 for i in ids]),
                     "region": ["eu" if i % 2 else "us" for i in ids]})


def delta_rows(path: Path, version: int | None = None) -> list[str]:
    """Every row as deltalake (DataFusion) reads it, canonical and sorted."""
    table = DeltaLakeTable(str(path), version=version)
    data = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t"))
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def iceberg_rows(catalog: dict[str, str], identifier: str, snapshot_id: int | None = None) -> list[str]:
    table = load_catalog("deltaberg", **catalog).load_table(identifier)
    data = table.scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def catalog_for(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}


# -- loading ------------------------------------------------------------------------------------------------


def test_every_example_loads_without_import_errors() -> None:
    bag = dag_bag()

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == set(EXAMPLES)
    for dag_id, file_name in EXAMPLES.items():
        dag = bag.dags[dag_id]
        assert Path(dag.fileloc).name == file_name
        assert "example" in dag.tags
        dag.validate()
    assert set(bag.dags["deltaberg_event_driven_regeneration"].task_dict) == {
        "wait_for_commits", "regenerate", "check_row_counts"}
    assert bag.dags["deltaberg_enable_writer_compat"].get_task("validate").upstream_task_ids == {"enable"}


def test_param_defaults_come_from_the_environment(load_example: Callable[..., Any]) -> None:
    catalog = {"type": "sql", "uri": "sqlite:////srv/lake/catalog.db"}
    dag = load_example("deltaberg_event_driven_regeneration", TABLE_URI="/srv/lake/orders",
                       IDENTIFIER="shop.orders", CATALOG=json.dumps(catalog),
                       MIN_COMMITS="3")

    assert (dag.params["table_uri"], dag.params["identifier"], dag.params["catalog"]) == (
        "/srv/lake/orders", "shop.orders", catalog)
    assert dag.get_task("wait_for_commits").min_commits == 3


#: The examples that run on their own once configured, and the settings that configure each.
SCHEDULED = {
    "deltaberg_scheduled_conversion": ("TABLE_URI", "IDENTIFIER"),
    "deltaberg_event_driven_regeneration": ("TABLE_URI", "IDENTIFIER"),
    "deltaberg_compliance_monitoring": ("TABLE_URI",),
    "deltaberg_asset_watcher": ("TABLE_URI", "IDENTIFIER"),
}


@pytest.mark.parametrize("dag_id", ONE_TABLE)
def test_an_unconfigured_example_runs_on_no_table(load_example: Callable[..., Any], dag_id: str) -> None:
    """Without its settings an example has no default table and no schedule (nothing runs on its own, whatever
    the deployment's dags_are_paused_at_creation); a manual run must name its table."""
    from airflow.sdk.exceptions import ParamValidationError

    dag = load_example(dag_id)

    assert dag.schedule is None
    assert dag.params.get_param("table_uri").resolve(suppress_exception=True) is None
    with pytest.raises(ParamValidationError, match="table_uri"):
        dag.params.validate()
    if dag_id in SCHEDULED:
        assert dag.is_paused_upon_creation is True
        assert f"not scheduled: set {dag_id.upper()}_TABLE_URI" in dag.description


@pytest.mark.parametrize("dag_id", sorted(SCHEDULED))
def test_each_example_reads_the_settings_named_after_its_dag_id(load_example: Callable[..., Any],
                                                                dag_id: str) -> None:
    others = {other: f"/srv/lake/{other}" for other in EXAMPLES if other != dag_id}
    for other, table in others.items():  # every other example is configured: none of it leaks into this one
        load_example(other, TABLE_URI=table, IDENTIFIER=f"lake.{other}")
    assert load_example(dag_id).schedule is None

    dag = load_example(dag_id, **{name: f"lake.{dag_id}" if name == "IDENTIFIER" else f"/srv/lake/{dag_id}"
                                  for name in SCHEDULED[dag_id]})

    assert dag.params["table_uri"] == f"/srv/lake/{dag_id}"
    assert dag.schedule is not None and "not scheduled" not in dag.description
    assert dag.is_paused_upon_creation is True


def test_an_unconfigured_scheduled_conversion_converts_the_table_a_manual_run_names(
        run_dag, load_example, tmp_path: Path) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 4))
    catalog = catalog_for(tmp_path)
    dag = load_example("deltaberg_scheduled_conversion", CATALOG=json.dumps(catalog))

    with pytest.raises(ParamValidationError, match="table_uri"):
        run_dag(dag)
    named = run_dag(dag, run_conf={"table_uri": str(table), "identifier": "shop.sales"})

    assert named.state == "success"
    assert iceberg_rows(catalog, "shop.sales") == delta_rows(table)


# -- scheduled conversion ------------------------------------------------------------------------------------


def test_scheduled_conversion_converts_then_catches_up(run_dag, load_example, tmp_path: Path) -> None:
    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 4), partition_by=["region"])
    write_deltalake(str(table), sales(4, 2), mode="append")
    catalog = catalog_for(tmp_path)
    dag = load_example("deltaberg_scheduled_conversion", TABLE_URI=str(table),
                       IDENTIFIER="shop.sales", CATALOG=json.dumps(catalog))

    first = run_dag(dag)

    assert first.state == "success"
    report = first.xcom("validate", "compliance_report")
    assert report["compliant"] is False  # a plain deltalake table: informational by default
    assert first.xcom("validate") is None  # the report is pushed once, under compliance_report
    converted = first.xcom("convert")
    assert (converted["mode"], converted["delta_version"], converted["records"]) == ("full", 1, 6)
    assert iceberg_rows(catalog, "shop.sales") == delta_rows(table)

    write_deltalake(str(table), sales(6, 3), mode="append")
    second = run_dag(dag)

    assert second.state == "success"
    caught_up = second.xcom("convert")
    assert (caught_up["mode"], caught_up["delta_version"], caught_up["snapshots_written"]) == ("incremental", 2, 1)
    assert iceberg_rows(catalog, "shop.sales") == delta_rows(table)
    assert iceberg_rows(catalog, "shop.sales", converted["snapshot_id"]) == delta_rows(table, version=1)


def test_scheduled_conversion_can_require_compliance(run_dag, load_example, tmp_path: Path) -> None:
    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 3))
    dag = load_example("deltaberg_scheduled_conversion", TABLE_URI=str(table),
                       IDENTIFIER="shop.sales", CATALOG=json.dumps(catalog_for(tmp_path)),
                       REQUIRE_COMPLIANCE="true", VALIDATION_LEVEL="compat-v2")

    result = run_dag(dag)

    assert result.state == "failed"
    assert (result.ti("validate").state, result.ti("validate").try_number) == ("failed", 1)  # no retries
    assert result.xcom("validate", "compliance_report")["level"] == "compat-v2"
    assert result.ti("convert").state == "upstream_failed"
    assert not (table / "_iceberg").exists()


# -- event driven ----------------------------------------------------------------------------------------------


def sensor_trigger(db: Path, dag_id: str) -> str | None:
    """The trigger classpath of the DAG's unfinished ``wait_for_commits`` task instance, read with sqlite3: a thread
    beside ``dag.test()`` must not use Airflow's ORM (its first query imports the models, and deadlocks with the
    imports of the run)."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        row = conn.execute(
            "SELECT t.classpath FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id WHERE ti.dag_id = ? "
            "AND ti.task_id = 'wait_for_commits' AND ti.state IN ('deferred', 'queued')", (dag_id,)).fetchone()
    return row[0] if row else None


@pytest.fixture
def append_when_deferred(airflow_db: Path) -> Iterator[Callable[[Path, str], dict[str, Any]]]:
    """``append_when_deferred(table, dag_id)`` starts a thread that appends to ``table`` once the DAG's sensor has
    deferred to its trigger (or after 90 s); the returned dict records what the thread saw.

    ``dag.test()`` runs a deferred task's trigger in line, the task instance back in state queued; the trigger
    row the deferral created stays linked to it until the task resumes."""
    threads: list[threading.Thread] = []

    def _start(table: Path, dag_id: str) -> dict[str, Any]:
        seen: dict[str, Any] = {"trigger": None, "appended": False}

        def run() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and seen["trigger"] is None:
                seen["trigger"] = sensor_trigger(airflow_db, dag_id)
                time.sleep(0.1)
            time.sleep(1)  # a poll or two find nothing new first
            write_deltalake(str(table), sales(100, 5), mode="append")
            seen["appended"] = True

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return seen

    yield _start
    for thread in threads:
        thread.join(timeout=120)


@pytest.mark.spark
def test_event_driven_regeneration_follows_a_new_commit(run_dag, load_example, append_when_deferred,
                                                        tmp_path: Path) -> None:
    java()
    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 6), partition_by=["region"])
    catalog = catalog_for(tmp_path)
    convert(str(table), catalog_config=catalog, identifier="shop.sales")  # Iceberg is up to date at version 0
    dag_id = "deltaberg_event_driven_regeneration"
    dag = load_example(dag_id, TABLE_URI=str(table), IDENTIFIER="shop.sales",
                       CATALOG=json.dumps(catalog), SPARK_CONF=json.dumps(submit_conf()),
                       POKE_SECONDS="0.5", WAIT_HOURS="0.05")
    seen = append_when_deferred(table, dag_id)

    result = run_dag(dag)

    assert result.state == "success", {t: result.ti(t).state for t in dag.task_ids}
    # The commit came while the trigger was polling.
    assert seen == {"trigger": "airflow_deltaberg.triggers.delta_commit.DeltaCommitTrigger", "appended": True}
    commits = result.xcom("wait_for_commits")
    assert commits == {"table": str(table), "from_version": 1, "to_version": 1, "new_commits": 1,
                       "start_version": 0, "start_from": "iceberg"}
    regenerated = result.xcom("regenerate")
    assert (regenerated["mode"], regenerated["delta_version"], regenerated["identifier"]) == (
        "incremental", 1, "shop.sales")
    checked = result.xcom("check_row_counts")
    assert checked == {"identifier": "shop.sales", "snapshot_id": regenerated["snapshot_id"], "delta_version": 1,
                       "iceberg_rows": 11, "delta_rows": 11}
    assert iceberg_rows(catalog, "shop.sales") == delta_rows(table)


def test_event_driven_check_fails_on_a_row_count_mismatch(run_dag, load_example, tmp_path: Path) -> None:
    """The check task against an Iceberg table that does not hold the Delta rows: one that lags (the
    regeneration did not happen), and the Iceberg table of another Delta table (a wrong identifier)."""
    table, other = tmp_path / "sales", tmp_path / "other"
    write_deltalake(str(table), sales(0, 4))
    write_deltalake(str(other), sales(0, 2))
    write_deltalake(str(other), sales(2, 1), mode="append")
    catalog = catalog_for(tmp_path)
    convert(str(table), catalog_config=catalog, identifier="shop.sales")  # at version 0
    convert(str(other), catalog_config=catalog, identifier="shop.other")  # at version 1: 3 rows
    write_deltalake(str(table), sales(4, 2), mode="append")  # version 1: 6 rows
    dag = load_example("deltaberg_event_driven_regeneration", TABLE_URI=str(table),
                       IDENTIFIER="shop.sales", CATALOG=json.dumps(catalog),
                       POKE_SECONDS="0.5", WAIT_HOURS="0.05")
    caught: list[BaseException | None] = []
    dag.get_task("check_row_counts").on_failure_callback = [lambda context: caught.append(context.get("exception"))]

    lagging = run_dag(dag, mark_success_pattern="regenerate")  # Spark never runs

    assert lagging.xcom("wait_for_commits")["to_version"] == 1
    assert (lagging.ti("check_row_counts").state, lagging.state) == ("failed", "failed")
    assert "Iceberg table shop.sales is behind" in str(caught[-1])
    assert "holds Delta version 0" in str(caught[-1]) and "to reach 1" in str(caught[-1])

    wrong = run_dag(dag, mark_success_pattern="regenerate", run_conf={"identifier": "shop.other"})

    assert wrong.ti("check_row_counts").state == "failed"
    assert str(caught[-1]).startswith("row count mismatch: Iceberg table shop.other")
    assert "has 3 rows" in str(caught[-1]) and f"{table} has 6 at version 1" in str(caught[-1])


def xcom_keys(dag_id: str, run_id: str, task_id: str) -> list[str]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return sorted(session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id,
                                                         key=None).with_only_columns(XComModel.key)).all())


def test_event_driven_check_pushes_its_counts_as_one_xcom(run_dag, load_example, monkeypatch,
                                                          tmp_path: Path) -> None:
    """The regeneration replaced by an in-process conversion (no Spark): the check passes and its dict is one
    XCom, not one per key."""
    from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator

    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 4))
    catalog = catalog_for(tmp_path)
    convert(str(table), catalog_config=catalog, identifier="shop.sales")
    write_deltalake(str(table), sales(4, 3), mode="append")
    monkeypatch.setattr(DeltaIcebergRegenerateOperator, "execute", lambda self, context: convert(
        str(table), catalog_config=catalog, identifier="shop.sales").to_dict())
    dag_id = "deltaberg_event_driven_regeneration"
    dag = load_example(dag_id, TABLE_URI=str(table), IDENTIFIER="shop.sales", CATALOG=json.dumps(catalog),
                       POKE_SECONDS="0.5", WAIT_HOURS="0.05")

    result = run_dag(dag)

    assert result.state == "success", {t: result.ti(t).state for t in dag.task_ids}
    assert xcom_keys(dag_id, result.dag_run.run_id, "check_row_counts") == ["return_value"]
    checked = result.xcom("check_row_counts")
    assert (checked["delta_version"], checked["iceberg_rows"], checked["delta_rows"]) == (1, 7, 7)


# -- asset watcher -------------------------------------------------------------------------------------------------


def test_asset_watcher_schedules_on_the_tables_commit_trigger(load_example: Callable[..., Any]) -> None:
    from airflow_deltaberg.triggers import DeltaCommitEventTrigger

    dag = load_example("deltaberg_asset_watcher", TABLE_URI="s3://lake/sales", IDENTIFIER="shop.sales",
                       STORAGE_CONN_ID="lake", POLL_SECONDS="5")

    [asset] = dag.timetable.asset_condition.objects
    assert asset.uri == "delta://s3/lake/sales"
    [watcher] = asset.watchers
    assert isinstance(watcher.trigger, DeltaCommitEventTrigger)
    assert watcher.trigger.serialize()[1] == {"table_uri": "s3://lake/sales", "poll_interval": 5.0,
                                              "min_commits": 1, "deltaberg_conn_id": "lake"}
    # Configured, the convert task reads the watched asset itself (one asset of that URI: its watcher stays) and
    # writes the Iceberg table's asset, so that graphs and DAGs scheduled on it see the task.
    convert = dag.get_task("convert")
    assert [a is asset for a in convert.inlets] == [True]
    assert [a.uri for a in convert.outlets] == ["iceberg://deltaberg/shop/sales"]


def asset_event(payload: dict[str, Any]) -> Any:
    """An asset event of a watcher, as the run's triggering_asset_events hold it (the extra Airflow writes)."""
    return type("AssetEvent", (), {"extra": {"from_trigger": True, "payload": payload}})()


def test_asset_watcher_run_converts_the_batch_of_its_events(run_dag, load_example, tmp_path: Path) -> None:
    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 4))
    write_deltalake(str(table), sales(4, 2), mode="append")
    catalog = catalog_for(tmp_path)
    dag = load_example("deltaberg_asset_watcher", TABLE_URI=str(table), IDENTIFIER="shop.sales",
                       CATALOG=json.dumps(catalog))

    manual = run_dag(dag)  # no asset event: the latest version

    assert manual.state == "success" and manual.xcom("commits") == {}
    assert (manual.xcom("convert")["mode"], manual.xcom("convert")["delta_version"]) == ("full", 1)
    assert iceberg_rows(catalog, "shop.sales") == delta_rows(table)
    # Two events queued while a run was busy make one batch.
    events = {"delta": [asset_event({"table": str(table), "from_version": 2, "to_version": 2, "table_id": "a"}),
                        asset_event({"table": str(table), "from_version": 3, "to_version": 4, "table_id": "a"})]}
    assert dag.get_task("commits").python_callable(triggering_asset_events=events) == {
        "table": str(table), "from_version": 2, "to_version": 4, "events": 2, "table_id": "a"}


# -- compliance monitoring ------------------------------------------------------------------------------------


def mail_parts(message: Any) -> tuple[str, dict[str, str]]:
    body, attachments = "", {}
    for part in message.walk():
        if part.get_content_maintype() == "multipart":
            continue
        if part.get_filename():
            attachments[part.get_filename()] = part.get_payload(decode=True).decode()
        else:
            body += part.get_payload(decode=True).decode()
    return body, attachments


def test_compliance_monitoring_alerts_when_the_table_drifts(run_dag, load_example, table_helpers, smtp_server,
                                                             webhook_server, monkeypatch, tmp_path: Path) -> None:
    table = ct.create_compliant_table(tmp_path / "orders", [("id", "long"), ("name", "string")])
    ct.add_files(table, {"id": [1, 2, 3], "name": ["a", "b", None]})
    path = tmp_path / "orders"
    monkeypatch.setenv("AIRFLOW_CONN_COMPLIANCE_HOOK", json.dumps(
        {"conn_type": "http", "host": webhook_server.host, "port": webhook_server.port, "schema": "http"}))
    dag = load_example("deltaberg_compliance_monitoring", TABLE_URI=str(path),
                       ALERT_EMAIL="owner@deltaberg.test, oncall@deltaberg.test",
                       SMTP_CONN_ID="smtp_test", WEBHOOK_CONN_ID="compliance_hook",
                       WEBHOOK_ENDPOINT="alerts/compliance")

    compliant = run_dag(dag)

    assert compliant.state == "success"
    report = compliant.xcom("validate", "compliance_report")
    assert report["compliant"] is True and report["level"] == "writer-compat-v1"
    assert report["data_checks"] is True and report["files_sampled"] == 1
    assert smtp_server.messages == [] and webhook_server.requests == []

    table_helpers.disable_writer_compat(path)  # someone turns the feature off
    drifted = run_dag(dag)

    assert drifted.state == "failed"
    ti = drifted.ti("validate")
    assert (ti.state, ti.try_number) == ("failed", 1)
    report = drifted.xcom("validate", "compliance_report")
    assert report["compliant"] is False
    assert [v["rule_id"] for v in report["violations"]] == ["property.enable-writer-compat-v1"]
    (message,) = smtp_server.messages
    assert smtp_server.envelopes[0][1] == ["owner@deltaberg.test", "oncall@deltaberg.test"]
    assert message["Subject"].startswith("[deltaberg] deltaberg_compliance_monitoring.validate: NOT COMPLIANT")
    body, attachments = mail_parts(message)
    assert "property.enable-writer-compat-v1" in body
    assert json.loads(attachments["compliance_report.json"]) == report
    (request,) = webhook_server.requests
    assert request.path == "/alerts/compliance"
    assert request.json()["report"] == report


# -- enablement --------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_enablement_plans_rewrites_and_validates(run_dag, load_example, monkeypatch, tmp_path: Path) -> None:
    java()
    # The enable operator runs `spark-submit` from PATH (unlike the regenerate operator, it does not look next to
    # the Python): the one of this environment's pyspark.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    table = tmp_path / "sales"
    write_deltalake(str(table), sales(0, 5), partition_by=["region"])
    write_deltalake(str(table), sales(5, 2), mode="append")
    before = delta_rows(table)
    dag = load_example("deltaberg_enable_writer_compat", TABLE_URI=str(table),
                       SPARK_JARS=delta_spark_jars(), SPARK_CONF=json.dumps(submit_conf()))

    result = run_dag(dag)

    assert result.state == "success", {t: result.ti(t).state for t in dag.task_ids}
    plan = result.xcom("plan", "enable_plan")
    assert (plan["read_version"], plan["needs_rewrite"], plan["blockers"]) == (1, True, [])
    assert result.xcom("plan")["action"] == "dry-run"
    enabled = result.xcom("enable")
    assert (enabled["action"], enabled["committed_version"]) == ("rewrite", 2)
    report = result.xcom("validate", "compliance_report")
    assert report["compliant"] is True and report["level"] == "writer-compat-v1"
    assert validate(str(table), data_checks=True).compliant
    assert delta_rows(table) == before  # the same rows, read by deltalake through column mapping
