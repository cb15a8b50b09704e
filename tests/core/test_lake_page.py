"""core.lake_page: the lag history from conversions and Delta versions seen, and the pages' HTML (parsed back)."""

from __future__ import annotations

import datetime as dt
from html.parser import HTMLParser

from airflow_deltaberg.core.fleet import FleetRow
from airflow_deltaberg.core.lake_page import LakeTable, Run, lag_history, overview_html, table_page_html

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_lag_rises_with_each_commit_and_falls_at_each_conversion() -> None:
    commits = [(at(0), 0), (at(1), 1), (at(2), 2), (at(5), 3)]
    conversions = [(at(3), 2), (at(6), 3)]
    points = lag_history(conversions, commits)
    assert [(p.when, p.delta_version, p.iceberg_version, p.lag) for p in points] == [
        (at(0), 0, None, 1), (at(1), 1, None, 2), (at(2), 2, None, 3), (at(3), 2, 2, 0), (at(5), 3, 2, 1),
        (at(6), 3, 3, 0)]
    assert lag_history(conversions, commits, limit=2) == points[-2:]


def test_a_conversion_proves_the_delta_version_it_converted() -> None:
    """Without commit times (a store the page cannot read) the conversions alone give Delta's versions."""
    points = lag_history([(at(1), 4), (at(2), 7)], [])
    assert [(p.delta_version, p.iceberg_version, p.lag) for p in points] == [(4, 4, 0), (7, 7, 0)]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self.bars: dict[str, str] = {}
        self.links: list[str] = []
        self.sheets: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "tr" and values.get("data-table"):
            self.rows[values["data-table"] or ""] = values.get("class") or ""
        if tag == "g" and values.get("data-label"):
            self.bars[values["data-label"] or ""] = values.get("data-status") or ""
        if tag == "a":
            self.links.append(values.get("href") or "")
        if tag == "link":
            self.sheets.append(values.get("href") or "")
        self.scripts += tag == "script"


def parsed(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def test_pages_list_every_table_with_a_bar_and_link_only_the_packaged_stylesheet() -> None:
    run = Run("convert", "fleet", "manual__1", "convert", "success", at(3), "/lake/<b>")
    tables = [
        LakeTable("file:///lake/a", FleetRow("db.a", "/lake/a", "compat-v2", True, 0, 0, 5, 4, "x", 10),
                  ("iceberg://deltaberg/db/a",), run, (run,), tuple(lag_history([(at(3), 4)], [(at(4), 5)]))),
        LakeTable("file:///lake/<b>", FleetRow("<b>", "/lake/<b>", error="convert failed")),
    ]
    overview = parsed(overview_html(tables, at(10)))
    assert overview.rows == {"db.a": "compliant", "<b>": "failed"}
    assert overview.bars == {"db.a": "compliant", "<b>": "failed"}
    assert overview.links == ["table?key=file%3A%2F%2F%2Flake%2Fa", "table?key=file%3A%2F%2F%2Flake%2F%3Cb%3E"]
    assert overview.sheets == ["static/deltaberg.css"] and overview.scripts == 0
    detail = parsed(table_page_html(tables[0]))
    assert list(detail.bars) == ["2026-11-01 00:03:00 UTC", "2026-11-01 00:04:00 UTC"]
    assert "<b>" not in table_page_html(tables[1]).split("<body>", 1)[1].replace("&lt;b&gt;", "")
    assert "No Delta table" in overview_html([], at(0))
