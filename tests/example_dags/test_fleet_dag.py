"""dags_examples/deltaberg_fleet.py as a user runs it: 17 tables under one prefix (copies of fixture tables, tables
written by deltalake, one with a corrupt commit) validated and converted in mapped tasks by ``dag.test()``; the
report read back as the HTML page (parsed), the webhook's JSON and an email; Iceberg rows read with pyiceberg."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog
from support.environment import FIXTURES_DIR, copy_fixture_table
from support.oracle import assert_same_rows, delta_arrow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags_examples" / "deltaberg_fleet.py"
DAG_ID = "deltaberg_fleet"
#: Small fixture tables that convert today (a subset of tests/fuzz's).
FIXTURES = ("app-txn-checkpoint", "basic-decimal-table", "basic_partitioned", "cdf-table-partitioned",
            "compacted-log-files-table", "mixed-nulls", "parsed-stats", "partition_cm/id", "table-with-dv-small",
            "table-without-dv-small")
BROKEN = "written/broken"
#: Tables written by deltalake: 1, 2 or 3 commits, partitioned or not (i % 3, i % 2): each combination once.
WRITTEN = 6


def load_fleet(monkeypatch: pytest.MonkeyPatch, **settings: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    for name, value in settings.items():
        monkeypatch.setenv(f"DELTABERG_FLEET_{name}", value)
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def build_fleet(root: Path) -> list[str]:
    """The fleet's tables under ``root`` (their names); one, BROKEN, has a commit that is not JSON."""
    for name in FIXTURES:
        if not (FIXTURES_DIR / name / "_delta_log").is_dir():
            pytest.skip(f"fixture table {name} absent")
        copy_fixture_table(name, root / "fixtures" / name)
    for i in range(WRITTEN):
        path = root / "written" / f"sales_{i:02d}"
        for commit in range(1 + i % 3):
            ids = list(range(commit * 3, commit * 3 + 3))
            write_deltalake(str(path), pa.table({"id": ids, "region": [f"r{i}"] * 3}), mode="append",
                            partition_by=["region"] if i % 2 else None)
    broken = root / BROKEN
    write_deltalake(str(broken), pa.table({"id": [1, 2]}))
    write_deltalake(str(broken), pa.table({"id": [3]}), mode="append")
    (broken / "_delta_log" / "00000000000000000001.json").write_text('{"add": {"path": "x.parquet", "si')
    return sorted([f"fixtures/{n}" for n in FIXTURES] + [f"written/sales_{i:02d}" for i in range(WRITTEN)] + [BROKEN])


class ReportPage(HTMLParser):
    """The rows of the report's table (cells by table name) and the bars of its chart (status by table name)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.bars: dict[str, str] = {}
        self.tags: set[str] = set()
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        values = dict(attrs)
        if tag == "tr" and values.get("data-table"):
            self._row = values["data-table"]
            self.rows[self._row or ""] = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "g" and values.get("data-label"):
            self.bars[values["data-label"] or ""] = values.get("data-status") or ""

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self._row = None


def test_the_fleet_dag_maps_every_table_and_reports_them_all(
        run_dag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook_server, smtp_server) -> None:
    lake = tmp_path / "lake"
    names = build_fleet(lake)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    monkeypatch.setenv("AIRFLOW_CONN_FLEET_HOOK", json.dumps(
        {"conn_type": "http", "host": webhook_server.host, "port": webhook_server.port, "schema": "http",
         "extra": {"headers": {"X-Fleet": "yes"}}}))
    dag = load_fleet(monkeypatch, TABLES_PREFIX=str(lake), CATALOG=json.dumps(catalog),
                     REPORT_DIR=str(tmp_path / "reports"), WEBHOOK_CONN_ID="fleet_hook",
                     ALERT_EMAIL="platform@deltaberg.test", SMTP_CONN_ID="smtp_test")

    result = run_dag(dag)

    assert len(names) >= 17
    assert [t["name"] for t in result.xcom("discover")] == names
    broken = names.index(BROKEN)
    for task_id in ("validate", "convert"):
        states = {ti.map_index: ti.state for ti in result.dag_run.get_task_instances() if ti.task_id == task_id}
        assert sorted(states) == list(range(len(names)))
        assert {i for i, s in states.items() if s != "success"} == {broken}, (task_id, states)
        assert states[broken] == "failed"
        labels = {ti.map_index: ti.rendered_map_index for ti in result.dag_run.get_task_instances()
                  if ti.task_id == task_id}
        assert labels == {i: str(lake / name) for i, name in enumerate(names)}
    assert result.ti("report").state == "success"

    fleet = result.xcom("report")
    by_name = {row["name"]: row for row in fleet["tables"]}
    assert list(by_name) == names
    assert by_name[BROKEN]["status"] == "failed"
    assert "validate failed" in by_name[BROKEN]["error"] and "convert failed" in by_name[BROKEN]["error"]
    for name in names:
        if name == BROKEN:
            continue
        row = by_name[name]
        assert row["status"] in ("compliant", "not compliant") and row["error"] is None, row
        assert row["lag"] == 0 and row["delta_version"] == row["iceberg_version"] and row["last_conversion"], row
        delta, _ = delta_arrow(lake / name)
        assert row["rows"] == delta.num_rows, name
    written = [n for n in names if n.startswith("written/sales")]
    assert {by_name[n]["delta_version"] for n in written} == {0, 1, 2}
    iceberg = load_catalog("deltaberg", **catalog)
    for name in ("written/sales_03", "fixtures/basic_partitioned", "fixtures/partition_cm/id"):
        identifier = "lake." + name.replace("/", "_").replace("-", "_").lower()
        assert_same_rows(iceberg.load_table(identifier).scan().to_arrow(), delta_arrow(lake / name)[0], name)

    html = Path(fleet["html"]).read_text(encoding="utf-8")
    page = ReportPage()
    page.feed(html)
    assert list(page.rows) == names and list(page.bars) == names
    assert page.bars[BROKEN] == "failed"
    assert {page.rows[n][1] for n in names if n != BROKEN} <= {"compliant", "not compliant"}
    assert "svg" in page.tags and not page.tags & {"script", "link", "img", "iframe"}

    (request,) = webhook_server.requests
    assert request.headers["X-Fleet"] == "yes"
    posted = request.json()
    assert [row["name"] for row in posted["fleet"]["tables"]] == names
    assert posted["summary"] == fleet["summary"]
    (message,) = smtp_server.messages
    assert fleet["summary"] in message["Subject"]


def test_the_fleet_dag_reads_a_list_file_and_without_a_source_has_no_schedule(
        run_dag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_deltalake(str(tmp_path / "a"), pa.table({"id": [1]}))
    write_deltalake(str(tmp_path / "b"), pa.table({"id": [2, 3]}))
    listing = tmp_path / "fleet.txt"
    listing.write_text(f"# the fleet\n{tmp_path / 'a'}\n{tmp_path / 'b'}\n")
    unconfigured = load_fleet(monkeypatch)
    assert unconfigured.schedule is None and unconfigured.is_paused_upon_creation is True

    dag = load_fleet(monkeypatch, TABLES_FILE=str(listing), REPORT_DIR=str(tmp_path / "reports"),
                     CATALOG=json.dumps({"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}))
    result = run_dag(dag)

    assert dag.schedule is not None
    assert result.ti("report").state == "success"
    rows = {r["name"]: (r["rows"], r["lag"], r["status"]) for r in result.xcom("report")["tables"]}
    assert rows == {"a": (1, 0, "not compliant"), "b": (2, 0, "not compliant")}

    # A run that names a Variable instead (a JSON list; names given), after a commit to b.
    write_deltalake(str(tmp_path / "b"), pa.table({"id": [4]}), mode="append")
    monkeypatch.setenv("AIRFLOW_VAR_FLEET_TABLES", json.dumps([{"name": "only_b", "uri": str(tmp_path / "b")}]))
    by_variable = run_dag(dag, run_conf={"tables_file": "", "tables_variable": "fleet_tables"})

    assert [t["name"] for t in by_variable.xcom("discover")] == ["only_b"]
    (row,) = by_variable.xcom("report")["tables"]
    assert (row["name"], row["rows"], row["delta_version"], row["lag"]) == ("only_b", 3, 1, 0)
