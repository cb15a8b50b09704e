"""The example DAGs under a real deployment (support.deployment): api-server, scheduler, dag-processor and triggerer
as separate processes, the LocalExecutor, a SQLite metadata DB, dags_examples/ as the DAG folder.

The event-driven DAG, configured through its own settings on a copy of a fixture table whose Iceberg metadata is up
to date, is unpaused: its sensor defers to the triggerer, a deltalake append fires the trigger, the Spark
regeneration and the row check succeed, and pyiceberg reads Delta's rows. The storage and catalog connections live
in the metadata DB with a fake secret each: the trigger resolves the storage connection in the triggerer, the
tasks both through the api-server; neither secret may reach a log file or the DB.

The asset-watcher example, in the same deployment, watches a deltalake-written table converted beforehand: an append
fires exactly one run, which converts it; then the triggerer is killed (SIGKILL), the table gets a second append
while none runs, and a triggerer started again fires one run for that batch alone (none repeated, none lost). Its
convert task declares the Iceberg table as its outlet: a DAG scheduled on that asset (CONSUMER, beside the
examples) runs after each conversion and reads the event's extra; the api-server's assets API names the producing
task and the scheduled DAG.

The fleet example, unpaused at the start, validates and converts three tables under a prefix (one with a corrupt
commit) meanwhile: two good tables are enough for a mapped task beside a failed one, and for one table that lags
beside one that does not. At the end the provider's plugin page is checked in headless Chromium (support.browser): the
plugins API lists its nav entry under Browse, and a user reaches it from Airflow's home page through the Browse
menu: the "Delta -> Iceberg" page, which lists the fleet's tables and the two examples' tables, the broken one as
failed; the table that got a commit after the fleet ran has a bar of its lag, on the page and in its lag over time
(screenshots of the open menu and of both pages saved in the test's tmp dir, checked not blank); Airflow's page of
the Iceberg asset names its producing task and the DAG scheduled on it; the connection forms of the provider's two
connection types show their fields."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from pyiceberg.catalog import load_catalog
from support.browser import chromium_page, colours, require_chromium
from support.deployment import Deployment, deployment
from support.environment import REPO_ROOT
from support.spark_session import java, submit_conf

from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark  # the regeneration is a spark-submit job

DAG_ID = "deltaberg_event_driven_regeneration"
WATCHER_DAG_ID = "deltaberg_asset_watcher"
CONSUMER_DAG_ID = "iceberg_consumer"
#: What a conversion's event on the Iceberg asset carries for the DAGs scheduled on it.
EVENT_KEYS = ("delta_version", "snapshot_id", "mode", "files_added", "records")
#: A DAG scheduled on the Iceberg table the asset-watcher example converts: it returns its triggering events' extras.
CONSUMER = f"""
import datetime as dt

from airflow.sdk import DAG, Asset, task

with DAG("{CONSUMER_DAG_ID}", schedule=[Asset("iceberg://deltaberg/lake/watched")],
         start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), catchup=False):

    @task(multiple_outputs=False)
    def conversions(triggering_asset_events=None):
        return [{{key: event.extra.get(key) for key in {EVENT_KEYS!r}}}
                for events in triggering_asset_events.values() for event in events]

    conversions()
"""
FLEET_DAG_ID = "deltaberg_fleet"
STORAGE_SECRET = "fake-storage-secret-d3pl0y-5t0r4g3"
CATALOG_SECRET = "fake-catalog-token-d3pl0y-c4t4l0g"


def delta_rows(path: Path) -> list[str]:
    data = pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT * FROM t"))
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def iceberg_rows(catalog: dict[str, str], identifier: str) -> list[str]:
    data = load_catalog("deltaberg", **catalog).load_table(identifier).scan().to_arrow()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def append_some_rows(path: Path) -> None:
    """Append three of the table's own rows again (its schema and partitioning, whatever they are)."""
    table = DeltaTable(str(path))
    rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t ORDER BY number LIMIT 3"))
    write_deltalake(str(path), rows, mode="append")


def deferred_trigger(deploy: Deployment) -> tuple[str, str, Any] | None:
    """(run_id, trigger classpath, triggerer id) of the sensor once it is deferred and a triggerer took its trigger."""
    rows = deploy.query(
        "SELECT ti.run_id, t.classpath, t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "WHERE ti.dag_id = ? AND ti.task_id = 'wait_for_commits' AND ti.state = 'deferred' "
        "AND t.triggerer_id IS NOT NULL", DAG_ID)
    return rows[0] if rows else None


def finished_run(deploy: Deployment, run_id: str) -> str | None:
    rows = deploy.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ? AND state IN ('success', 'failed')",
                        DAG_ID, run_id)
    return rows[0][0] if rows else None


def secrets_found(deploy: Deployment, secrets: tuple[str, ...]) -> list[str]:
    """Where any of ``secrets`` shows: log files, the processes' output, the metadata DB's files (every table:
    the log table, XComs, rendered fields, trigger kwargs; connections are Fernet-encrypted)."""
    places = [*deploy.log_files(), *(deploy.output(name) for name in deploy.processes),
              *deploy.home.glob("airflow.db*")]
    found = []
    for place in places:
        data = place.read_bytes()
        found += [f"{place}: {secret}" for secret in secrets if secret.encode() in data]
    return found



def watcher_trigger_running(deploy: Deployment) -> bool:
    """Whether a live triggerer runs the asset watcher's trigger."""
    return bool(deploy.query(
        "SELECT t.id FROM trigger t JOIN job j ON j.id = t.triggerer_id WHERE j.state = 'running' "
        "AND t.classpath = 'airflow_deltaberg.triggers.delta_commit_event.DeltaCommitEventTrigger'"))


def watcher_runs(deploy: Deployment) -> list[tuple[str, str, str]]:
    """(run_id, run_type, state) of every run of the asset-watcher example, oldest first."""
    return deploy.query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = ? ORDER BY id", WATCHER_DAG_ID)


def finished_runs(deploy: Deployment, count: int) -> list[tuple[str, str, str]] | None:
    runs = watcher_runs(deploy)
    return runs if len(runs) >= count and all(state in ("success", "failed") for _, _, state in runs) else None


def kill_triggerer(deploy: Deployment) -> None:
    """SIGKILL the triggerer's process group: no shutdown, no last sync with the DB."""
    process = deploy.processes.pop("triggerer")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def check_asset_watcher(deploy: Deployment, table: Path, catalog: dict[str, str]) -> None:
    """One run per append, across a triggerer killed and started again between the two."""
    deploy.wait_for("the dag-processor to store the asset-watcher DAG", lambda: deploy.query(
        "SELECT is_paused FROM dag WHERE dag_id = ? AND is_stale = 0", WATCHER_DAG_ID), timeout=180)
    deploy.unpause(WATCHER_DAG_ID)
    # Airflow registers an asset's watchers when it parses the file of an unpaused DAG: parse it now.
    deploy.reparse(WATCHER_DAG_ID)
    deploy.wait_for("the watcher's trigger to run", lambda: watcher_trigger_running(deploy), timeout=180)
    time.sleep(3)  # polls find nothing new: the Iceberg metadata is at the latest version
    assert watcher_runs(deploy) == []
    write_deltalake(str(table), pa.table({"id": [10, 11]}), mode="append")  # version 1
    [first] = deploy.wait_for("the first watcher run", lambda: finished_runs(deploy, 1), timeout=300)
    kill_triggerer(deploy)
    write_deltalake(str(table), pa.table({"id": [12]}), mode="append")  # version 2, no triggerer running
    deploy.start("triggerer")
    runs = deploy.wait_for("the second watcher run", lambda: finished_runs(deploy, 2), timeout=300)
    time.sleep(5)  # a few more polls of the restarted trigger: no run for a batch already reported
    assert watcher_runs(deploy) == runs and len(runs) == 2, deploy.diagnostics()
    assert [(run_type, state) for _, run_type, state in runs] == [("asset_triggered", "success")] * 2, (
        deploy.diagnostics())
    batches = [deploy.xcom(WATCHER_DAG_ID, run_id, "commits")["return_value"] for run_id, _, _ in runs]
    assert [(b["from_version"], b["to_version"], b["events"]) for b in batches] == [(1, 1, 1), (2, 2, 1)]
    converted = [deploy.xcom(WATCHER_DAG_ID, run_id, "convert")["return_value"] for run_id, _, _ in runs]
    assert [(c["mode"], c["delta_version"]) for c in converted] == [("incremental", 1), ("incremental", 2)]
    assert first[0] == runs[0][0]
    assert iceberg_rows(catalog, "lake.watched") == delta_rows(table)
    check_iceberg_asset_consumer(deploy, table, [{key: c[key] for key in EVENT_KEYS} for c in converted])


def api_get(deploy: Deployment, path: str, **query: Any) -> Any:
    """A GET on the api-server's public API (every user is an admin in this deployment)."""
    url = f"http://127.0.0.1:{deploy.api_port}/api/v2/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def check_iceberg_asset_consumer(deploy: Deployment, table: Path, conversions: list[dict[str, Any]]) -> None:
    """The consumer DAG ran after the conversions, with their extras; the assets API shows who makes the asset."""
    def consumer_runs() -> list[tuple[str, str, str]] | None:
        runs = deploy.query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = ? ORDER BY id",
                            CONSUMER_DAG_ID)
        seen = sum(len(deploy.xcom(CONSUMER_DAG_ID, run_id, "conversions").get("return_value") or [])
                   for run_id, _, state in runs if state == "success")
        return runs if seen >= len(conversions) and all(s in ("success", "failed") for *_, s in runs) else None

    runs = deploy.wait_for("the consumer DAG's runs", consumer_runs, timeout=120)
    assert {(run_type, state) for _, run_type, state in runs} == {("asset_triggered", "success")}, deploy.diagnostics()
    received = [extra for run_id, _, _ in runs
                for extra in deploy.xcom(CONSUMER_DAG_ID, run_id, "conversions")["return_value"]]
    assert received == conversions  # in order, each conversion once: the Delta version, snapshot, mode, counts
    assert [e["files_added"] for e in received] == [1, 1] and [e["records"] for e in received] == [4, 5]

    [iceberg] = api_get(deploy, "assets", uri_pattern="iceberg://deltaberg/lake/watched")["assets"]
    assert [(t["dag_id"], t["task_id"]) for t in iceberg["producing_tasks"]] == [(WATCHER_DAG_ID, "convert")]
    assert [d["dag_id"] for d in iceberg["scheduled_dags"]] == [CONSUMER_DAG_ID]
    events = api_get(deploy, "assets/events", asset_id=iceberg["id"], order_by="timestamp")["asset_events"]
    assert [(e["source_dag_id"], e["source_task_id"]) for e in events] == [(WATCHER_DAG_ID, "convert")] * 2
    assert [{key: e["extra"][key] for key in EVENT_KEYS} for e in events] == conversions
    [delta] = api_get(deploy, "assets", uri_pattern=f"delta://file{table}")["assets"]
    assert [(t["dag_id"], t["task_id"]) for t in delta["consuming_tasks"]] == [(WATCHER_DAG_ID, "convert")]
    assert [d["dag_id"] for d in delta["scheduled_dags"]] == [WATCHER_DAG_ID]


def build_fleet(root: Path) -> None:
    """Two deltalake tables and one whose second commit is not JSON, under ``root``."""
    for i in range(2):
        write_deltalake(str(root / f"sales_{i}"), pa.table({"id": [i, i + 1]}))
    broken = root / "broken"
    write_deltalake(str(broken), pa.table({"id": [1, 2]}))
    write_deltalake(str(broken), pa.table({"id": [3]}), mode="append")
    (broken / "_delta_log" / "00000000000000000001.json").write_text('{"add": {"path": "x.parquet", "si')


def finished_fleet_run(deploy: Deployment) -> tuple[str, str] | None:
    rows = deploy.query("SELECT run_id, state FROM dag_run WHERE dag_id = ? AND state IN ('success', 'failed')",
                        FLEET_DAG_ID)
    return rows[0] if rows else None


def bar_widths(frame: Any, chart: str) -> dict[str, float]:
    """The width of each bar of a chart, by its label, as the browser laid it out."""
    widths = {}
    for bar in frame.locator(f"{chart} g.bar").all():
        box = bar.locator("rect").bounding_box()
        widths[bar.get_attribute("data-label")] = box["width"] if box else 0.0
    return widths


def connection_form_labels(page: Any, base: str, hook_name: str) -> list[str]:
    """The field labels of the UI's Add Connection form once the connection type ``hook_name`` is chosen."""
    page.goto(base + "/connections")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    box = dialog.get_by_role("combobox")
    box.click()
    box.fill(hook_name)
    page.keyboard.press("Enter")
    dialog.get_by_text("Extra Fields JSON").wait_for(timeout=60_000)
    return [label.inner_text().strip().rstrip("*").strip() for label in dialog.locator("label").all()]


def check_plugin_page(deploy: Deployment, shots: Path, tables: set[str], lagging: str) -> None:
    """The provider's page in Airflow's UI, in headless Chromium (see the module's docstring)."""
    from airflow_deltaberg.provider_info import CONNECTION_TYPES

    base = f"http://127.0.0.1:{deploy.api_port}"
    [view] = [v for p in api_get(deploy, "plugins")["plugins"] if p["name"] == "deltaberg" for v in p["external_views"]]
    assert (view["name"], view["category"], view["destination"]) == ("Delta -> Iceberg", "browse", "nav")
    with chromium_page() as page:  # every user is an admin in this deployment: no login
        page.set_default_timeout(120_000)  # a busy 2-core machine renders Airflow's UI slowly
        # As a user gets there: Airflow's home page, its Browse menu, the plugin's entry in it.
        page.goto(base + "/")
        page.get_by_role("button", name="Browse").click()
        entry = page.get_by_role("menuitem", name=view["name"], exact=True)
        entry.wait_for()
        page.screenshot(path=shots / "browse-menu.png")
        assert colours(page, shots / "browse-menu.png") > 20
        entry.click()
        page.wait_for_url(f"{base}/plugin/{view['url_route']}")  # the entry's own route: a bookmark's too
        frame = page.frame_locator("iframe")
        frame.locator("#tables").wait_for(timeout=120_000)
        rows = {row.get_attribute("data-table"): row.get_attribute("class")
                for row in frame.locator("#tables tbody tr").all()}
        assert tables <= set(rows), rows
        assert rows["broken"] == "failed", rows
        widths = bar_widths(frame, "#lag-chart")
        assert widths[lagging] > 0 and widths["broken"] > 0, widths
        page.screenshot(path=shots / "delta-iceberg.png", full_page=True)
        assert colours(page, shots / "delta-iceberg.png") > 20

        frame.get_by_role("link", name=lagging, exact=True).click()
        frame.locator("#history-chart").wait_for(timeout=120_000)
        history = bar_widths(frame, "#history-chart")
        assert history and list(history.values())[-1] > 0, history  # the newest point: one commit behind
        page.screenshot(path=shots / "delta-iceberg-table.png", full_page=True)
        assert colours(page, shots / "delta-iceberg-table.png") > 20

        # Airflow's own page of the Iceberg asset: the task that produces it and the DAG scheduled on it.
        [iceberg] = api_get(deploy, "assets", uri_pattern="iceberg://deltaberg/lake/watched")["assets"]
        page.goto(f"{base}/assets/{iceberg['id']}")
        page.get_by_text(CONSUMER_DAG_ID).first.wait_for(timeout=120_000)  # the graph: producer -> asset -> consumer
        page.get_by_text(WATCHER_DAG_ID).first.wait_for(timeout=60_000)
        page.get_by_text("Producing Tasks").wait_for(timeout=60_000)
        shown = page.locator("body").inner_text()
        assert "Producing Tasks\n1 Task" in shown and "Scheduled Dags\n1 Dag" in shown, shown
        page.screenshot(path=shots / "iceberg-asset.png", full_page=True)
        assert colours(page, shots / "iceberg-asset.png") > 20

        for entry in CONNECTION_TYPES:
            labels = connection_form_labels(page, base, entry["hook-name"])
            wanted = [field["label"] for field in entry["conn-fields"].values()]
            assert set(wanted) <= set(labels), (entry["connection-type"], labels)


def test_event_driven_example_runs_under_scheduler_triggerer_and_local_executor(copy_fixture,
                                                                                 tmp_path: Path) -> None:
    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = time.monotonic() - started - sum(phases.values())

    java()
    require_chromium()
    table = copy_fixture("basic_partitioned")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    convert(str(table), catalog_config=catalog, identifier="lake.basic")  # Iceberg up to date at Delta version 1
    watched = tmp_path / "watched"
    write_deltalake(str(watched), pa.table({"id": [1, 2]}))
    convert(str(watched), catalog_config=catalog, identifier="lake.watched")  # Iceberg at Delta version 0
    fleet = tmp_path / "fleet"
    build_fleet(fleet)
    phase("copy and convert the fixture, write the fleet")
    setting = DAG_ID.upper() + "_"
    settings = {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        setting + "TABLE_URI": str(table),
        setting + "IDENTIFIER": "lake.basic",
        setting + "STORAGE_CONN_ID": "lake_storage",
        setting + "CATALOG_CONN_ID": "lake_catalog",
        setting + "SPARK_CONF": json.dumps(submit_conf()),
        setting + "POKE_SECONDS": "1",
        setting + "WAIT_HOURS": "0.05",
        **{WATCHER_DAG_ID.upper() + "_" + name: value for name, value in {
            "TABLE_URI": str(watched), "IDENTIFIER": "lake.watched", "STORAGE_CONN_ID": "lake_storage",
            "CATALOG_CONN_ID": "lake_catalog", "POLL_SECONDS": "1"}.items()},
        "DELTABERG_FLEET_TABLES_PREFIX": str(fleet),
        "DELTABERG_FLEET_CATALOG": json.dumps(catalog),
        # A worker parses the DAG file before its task: on a loaded machine four at once took over the default 30 s.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        # A killed triggerer's triggers go to a new one once its heartbeat is this old (default 30 s).
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
    }
    connections = {
        "lake_storage": {"conn_type": "deltaberg", "extra": json.dumps({"secret": STORAGE_SECRET})},
        "lake_catalog": {"conn_type": "generic", "extra": json.dumps({**catalog, "token": CATALOG_SECRET})},
    }

    dags = tmp_path / "dags"  # the examples, and a DAG scheduled on the Iceberg table one of them converts
    shutil.copytree(REPO_ROOT / "dags_examples", dags, ignore=shutil.ignore_patterns("__pycache__"))
    (dags / "iceberg_consumer.py").write_text(CONSUMER, encoding="utf-8")

    with deployment(tmp_path / "airflow", settings, dags_folder=dags, connections=connections) as deploy:
        phases.update(deploy.timings)
        stored = deploy.wait_for("the dag-processor to store the event-driven DAG", lambda: deploy.query(
            "SELECT is_paused FROM dag WHERE dag_id = ? AND is_stale = 0", DAG_ID), timeout=180)
        assert stored == [(1,)]  # paused when first seen
        deploy.unpause(DAG_ID)
        deploy.wait_for("the dag-processor to store the fleet DAG", lambda: deploy.query(
            "SELECT is_paused FROM dag WHERE dag_id = ? AND is_stale = 0", FLEET_DAG_ID), timeout=180)
        deploy.unpause(FLEET_DAG_ID)  # one run (catchup off), beside the rest
        phase("DAGs parsed and unpaused")
        run_id, classpath, _triggerer = deploy.wait_for("the sensor to defer to the triggerer",
                                                        lambda: deferred_trigger(deploy), timeout=180)
        assert classpath == "airflow_deltaberg.triggers.delta_commit.DeltaCommitTrigger"
        phase("run created, sensor deferred, trigger running")
        time.sleep(2)  # a poll or two of the trigger find nothing new first
        append_some_rows(table)  # Delta version 2
        state = deploy.wait_for("the run to finish", lambda: finished_run(deploy, run_id), timeout=300)
        phase("append fired the trigger, run finished")

        dags = deploy.query("SELECT dag_id, is_paused, timetable_summary FROM dag WHERE is_stale = 0")
        assert deploy.query("SELECT count(*) FROM import_error") == [(0,)]
        # The secrets are in the DB, encrypted with the deployment's Fernet key (the scan below finds them nowhere).
        assert deploy.query("SELECT conn_id, is_extra_encrypted FROM connection WHERE conn_id LIKE 'lake_%' "
                            "ORDER BY conn_id") == [("lake_catalog", 1), ("lake_storage", 1)]
        # The deployment creates DAGs unpaused (dags_are_paused_at_creation=False); the examples that run on their
        # own are paused all the same, and the unconfigured ones have no schedule: none runs on a table nobody chose.
        assert set(dags) == {
            (DAG_ID, 0, "@continuous"), ("deltaberg_scheduled_conversion", 1, "None"),
            ("deltaberg_compliance_monitoring", 1, "None"), ("deltaberg_enable_writer_compat", 0, "None"),
            (WATCHER_DAG_ID, 1, "Asset"), (FLEET_DAG_ID, 0, "0 0 * * *"), (CONSUMER_DAG_ID, 0, "Asset")}
        states = deploy.task_states(DAG_ID, run_id)
        assert (state, states) == ("success", dict.fromkeys(("wait_for_commits", "regenerate", "check_row_counts"),
                                                            "success")), deploy.diagnostics()
        commits = deploy.xcom(DAG_ID, run_id, "wait_for_commits")["return_value"]
        assert (commits["start_version"], commits["from_version"], commits["to_version"]) == (1, 2, 2)
        regenerated = deploy.xcom(DAG_ID, run_id, "regenerate")["return_value"]
        assert (regenerated["mode"], regenerated["delta_version"]) == ("incremental", 2)
        checked = deploy.xcom(DAG_ID, run_id, "check_row_counts")
        assert list(checked) == ["return_value"]  # one XCom for the dict, not one per key
        assert checked["return_value"]["iceberg_rows"] == checked["return_value"]["delta_rows"] == 9
        # A task log per task, written by the workers; the secrets are checked against them below.
        task_logs = {p.parent.name for p in deploy.log_files() if f"dag_id={DAG_ID}" in str(p)}
        assert {"task_id=wait_for_commits", "task_id=regenerate", "task_id=check_row_counts"} <= task_logs
        check_asset_watcher(deploy, watched, catalog)
        phase("asset watcher: two appends, two runs, the triggerer killed between them")
        fleet_run = deploy.wait_for("the fleet run", lambda: finished_fleet_run(deploy), timeout=600)
        fleet_states = deploy.query("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? "
                                    "AND state != 'success'", FLEET_DAG_ID)
        assert fleet_run[1] == "success" and {(t, s) for t, _, s in fleet_states} == {
            ("validate", "failed"), ("convert", "failed")}, (fleet_states, deploy.diagnostics())
        write_deltalake(str(fleet / "sales_1"), pa.table({"id": [9]}), mode="append")  # one version behind
        phase("fleet run finished")
        require_chromium()
        check_plugin_page(deploy, tmp_path, {"lake.sales_0", "lake.sales_1", "broken",
                                                    "lake.basic", "lake.watched"}, "lake.sales_1")
        phase("plugin page and connection forms in Chromium")
    phase("processes stopped")
    assert iceberg_rows(catalog, "lake.basic") == delta_rows(table)
    assert secrets_found(deploy, (STORAGE_SECRET, CATALOG_SECRET)) == []
    phase("rows and secrets checked")
    print("deployment test:", ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases.items()),
          f"= {time.monotonic() - started:.0f} s")
