"""core.fleet: the tables of a fleet (a prefix listed with bounds, a list) and its report, on real deltalake
tables converted in process; core.fleet_html: the page parses and its chart holds a bar per table."""

from __future__ import annotations

import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.errors import FleetDiscoveryError
from airflow_deltaberg.core.fleet import (
    FleetTable,
    discover_prefix,
    fleet_report,
    fleet_row,
    parse_table_list,
    table_versions,
)
from airflow_deltaberg.core.fleet_html import report_html
from airflow_deltaberg.core.iceberg.convert import convert


def write(path: Path, rows: int = 2, commits: int = 1) -> Path:
    for i in range(commits):
        write_deltalake(str(path), pa.table({"id": list(range(i * rows, (i + 1) * rows))}),
                        mode="append" if i else "error")
    return path


def test_a_prefix_lists_the_folders_holding_a_delta_log(tmp_path: Path) -> None:
    write(tmp_path / "sales")
    write(tmp_path / "eu" / "orders")
    write(tmp_path / "eu" / "deep" / "er" / "hidden")  # 4 levels down
    write(tmp_path / "_staging" / "t")
    (tmp_path / "empty" / "sub").mkdir(parents=True)

    tables = discover_prefix(str(tmp_path), max_depth=3)

    assert tables == [FleetTable("eu/orders", str(tmp_path / "eu" / "orders")),
                      FleetTable("sales", str(tmp_path / "sales"))]
    assert [t.name for t in discover_prefix(str(tmp_path), max_depth=4)] == ["eu/deep/er/hidden", "eu/orders",
                                                                            "sales"]
    assert tables[0].identifier("lake") == "lake.eu_orders"


def test_a_prefix_over_the_bound_or_without_tables_is_refused(tmp_path: Path) -> None:
    for name in "abc":
        write(tmp_path / name)

    with pytest.raises(FleetDiscoveryError, match="more than 2 Delta tables"):
        discover_prefix(str(tmp_path), max_tables=2)
    with pytest.raises(FleetDiscoveryError, match="no Delta table"):
        discover_prefix(str(tmp_path / "a" / "_delta_log"))


def test_a_list_is_json_or_one_location_a_line() -> None:
    assert parse_table_list("# fleet\n/lake/a\n\ns3://b/c/\n", source="f") == [
        FleetTable("a", "/lake/a"), FleetTable("c", "s3://b/c/")]
    assert parse_table_list(json.dumps(["/x/a", {"name": "b2", "uri": "/y/b"}]), source="v") == [
        FleetTable("a", "/x/a"), FleetTable("b2", "/y/b")]
    for text, message in [("[1]", "not a table location"), ("", "lists no table"), ("[", "not a JSON list"),
                          ("/x/a\n/y/a", "given twice: a")]:
        with pytest.raises(FleetDiscoveryError, match=message):
            parse_table_list(text, source="variable fleet")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[str] = []
        self.bars: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if tag == "tr" and values.get("data-table"):
            self.rows.append(values["data-table"] or "")
        if tag == "g" and values.get("data-label"):
            self.bars[values["data-label"] or ""] = values.get("data-status") or ""


def test_the_report_gives_lag_compliance_and_rows_and_its_page_draws_them(tmp_path: Path) -> None:
    current = write(tmp_path / "current", rows=3)
    lagging = write(tmp_path / "lagging", rows=2, commits=1)
    converted = convert(str(current)).records, convert(str(lagging)).records
    write_deltalake(str(lagging), pa.table({"id": [9]}), mode="append")
    write_deltalake(str(lagging), pa.table({"id": [10]}), mode="append")
    missing = FleetTable("gone", str(tmp_path / "gone"))

    rows = [fleet_row(FleetTable("current", str(current)), validate(str(current)).to_dict(), None),
            fleet_row(FleetTable("lagging", str(lagging)), None, None),
            fleet_row(missing, None, "CorruptLogError: bad commit")]
    report = fleet_report(rows)

    assert converted == (3, 2)
    current_row, lagging_row, missing_row = report.rows
    assert (current_row.delta_version, current_row.iceberg_version, current_row.lag) == (0, 0, 0)
    assert (current_row.compliant, current_row.status, current_row.rows) == (False, "not compliant", 3)
    assert current_row.error_count and current_row.last_conversion
    assert (lagging_row.delta_version, lagging_row.iceberg_version, lagging_row.lag) == (2, 0, 2)
    assert lagging_row.rows == 2  # the Iceberg table's rows, at the version it was converted from
    assert (missing_row.status, missing_row.error, missing_row.lag) == ("failed", "CorruptLogError: bad commit", None)
    assert report.counts() == {"compliant": 0, "not compliant": 1, "unchecked": 1, "failed": 1}
    assert "| lagging | unchecked |" in report.to_markdown()
    page = _Page()
    html = report_html(report)
    page.feed(html)
    assert page.rows == ["current", "lagging", "gone"]
    assert page.bars == {"current": "not compliant", "lagging": "unchecked", "gone": "failed"}
    assert "svg" in page.tags and "script" not in page.tags and "link" not in page.tags
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_an_object_store_prefix_lists_its_common_prefixes() -> None:
    """fsspec's listing (FsspecStorage.list_folders): folders are the prefixes of the keys below them."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for key in ("lake/a/_delta_log/00000000000000000000.json", "lake/b/c/_delta_log/00000000000000000000.json",
                "lake/b/c/part-0.parquet", "lake/loose.json", "lake/_tmp/x/_delta_log/0.json"):
        fs.pipe(f"/fleet-test/{key}", b"{}")
    try:
        tables = discover_prefix("memory://fleet-test/lake")
    finally:
        fs.rm("/fleet-test", recursive=True)

    assert [(t.name, t.uri) for t in tables] == [("a", "memory://fleet-test/lake/a"),
                                                 ("b/c", "memory://fleet-test/lake/b/c")]


def test_table_versions_give_the_commit_times_of_one_listing(tmp_path: Path) -> None:
    table = write(tmp_path / "events", commits=4)
    for version in range(4):  # distinct times, as commits an hour apart
        stamp = 1_700_000_000 + 3600 * version
        os.utime(table / "_delta_log" / f"{version:020d}.json", (stamp, stamp))
    convert(str(table))

    since = table_versions(FleetTable("events", str(table)), commits_from=2)
    whole = table_versions(FleetTable("events", str(table)))

    assert (since.delta_version, since.iceberg_version) == (3, 3)
    assert since.commits == ((2, 1_700_007_200_000), (3, 1_700_010_800_000))
    assert [v for v, _ in whole.commits] == [0, 1, 2, 3]  # no checkpoint: the whole log
    # Written again, shorter: nothing from version 2 on; the table's versions and commits are still read.
    shutil.rmtree(table / "_delta_log")
    write_deltalake(str(table), pa.table({"id": [1]}), mode="append")
    again = table_versions(FleetTable("events", str(table)), commits_from=2)
    assert (again.delta_version, [v for v, _ in again.commits]) == (0, [0])
