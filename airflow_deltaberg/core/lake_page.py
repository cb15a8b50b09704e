"""The plugin's "Delta -> Iceberg" pages as HTML: the tables the provider converted or validated (compliance, lag,
last run) with the fleet report's bar chart of lag per table, and one page per table with its lag over time. No
Airflow: the plugin (airflow_deltaberg/plugins) gathers the facts from Airflow's DB and calls these. No script;
the one stylesheet is a file of the package, linked relatively, so nothing is fetched from elsewhere."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from airflow_deltaberg.core import display
from airflow_deltaberg.core.fleet import FleetReport, FleetRow
from airflow_deltaberg.core.fleet_html import Bar, bars_svg, chart_svg

TITLE = "Delta -> Iceberg"
#: Points of a table's lag history drawn at most (the newest).
HISTORY_POINTS = 40


@dataclass(frozen=True)
class Run:
    """A task of the provider that touched the table: what it did, where, in which state, when it ended."""

    kind: str
    dag_id: str
    run_id: str
    task_id: str
    state: str | None
    when: dt.datetime | None
    map_label: str | None = None

    def text(self) -> str:
        where = f"{self.dag_id} / {self.run_id} / {self.task_id}" + (f" [{self.map_label}]" if self.map_label else "")
        return f"{self.kind} {self.state or 'unknown'} {_time(self.when)}: {where}"


@dataclass(frozen=True)
class LagPoint:
    """The table at one moment: the Delta version known then, the Delta version Iceberg held then (None before
    the first conversion)."""

    when: dt.datetime
    delta_version: int
    iceberg_version: int | None

    @property
    def lag(self) -> int:
        return self.delta_version - (self.iceberg_version if self.iceberg_version is not None else -1)


@dataclass(frozen=True)
class LakeTable:
    """One table of the page: its report line, the assets its events were on, its last run, its lag history."""

    key: str
    row: FleetRow
    assets: tuple[str, ...] = ()
    last_run: Run | None = None
    runs: tuple[Run, ...] = ()
    history: tuple[LagPoint, ...] = ()


def lag_history(conversions: Sequence[tuple[dt.datetime, int]], delta_versions: Sequence[tuple[dt.datetime, int]],
                limit: int = HISTORY_POINTS) -> list[LagPoint]:
    """The lag at every moment something is known to have happened: a Delta version seen (a commit's time, an
    event naming it) or a conversion (which also proves Delta had reached its version). At each moment the Delta
    version is the highest seen so far and the Iceberg version the last conversion's; the newest ``limit``."""
    moments = sorted({t for t, _ in conversions} | {t for t, _ in delta_versions})
    converted = sorted(conversions)
    seen = sorted([*delta_versions, *conversions])
    points: list[LagPoint] = []
    delta, iceberg, c, s = -1, None, 0, 0
    for moment in moments:
        while s < len(seen) and seen[s][0] <= moment:
            delta = max(delta, seen[s][1])
            s += 1
        while c < len(converted) and converted[c][0] <= moment:
            iceberg = converted[c][1]
            c += 1
        if delta >= 0:
            points.append(LagPoint(moment, delta, iceberg))
    return points[-limit:]


def _time(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cell(value: object) -> str:
    return f"<td>{display.html('-' if value is None else value)}</td>"


def _head(title: str, css_href: str) -> list[str]:
    return ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{display.html(title)}</title>",
            f'<link rel="stylesheet" href="{display.html(css_href)}"></head><body>']


def table_href(key: str) -> str:
    """The relative link of a table's page."""
    return "table?key=" + quote(key, safe="")


def overview_html(tables: Sequence[LakeTable], generated: dt.datetime, css_href: str = "static/deltaberg.css",
                  notes: Sequence[str] = ()) -> str:
    """The page of every table: summary, the bar chart of lag per table (coloured by compliance), then one row
    per table (``<tr data-table=name>``) linking to its own page."""
    report = FleetReport(tuple(t.row for t in tables), generated=generated.isoformat(timespec="seconds"))
    head = ["table", "status", "level", "errors", "warnings", "Delta version", "Iceberg version", "lag",
            "last conversion", "rows", "last run", "assets", "error"]
    body = []
    for t in tables:
        r = t.row
        cells = [r.status, r.level, r.error_count, r.warning_count, r.delta_version, r.iceberg_version, r.lag,
                 r.last_conversion, r.rows, t.last_run.text() if t.last_run else None,
                 " ".join(t.assets) or None, r.error]
        body.append(f'<tr data-table="{display.html(r.name)}" class="{r.status.replace(" ", "-")}">'
                    f'<td><a href="{display.html(table_href(t.key))}">{display.html(r.name)}</a></td>'
                    + "".join(_cell(c) for c in cells) + "</tr>")
    parts = _head(TITLE, css_href) + [
        f"<h1>{display.html(TITLE)}</h1>",
        f'<p id="summary">{display.html(report.summary())} (read {display.html(_time(generated))})</p>',
        *(f'<p class="note">{display.html(n)}</p>' for n in notes)]
    if not tables:
        parts.append('<p id="empty">No Delta table converted or validated by this provider yet: its operators\' '
                     "asset events and results show here once they ran.</p>")
    else:
        parts += ['<div class="chart" id="lag-chart">', chart_svg(report), "</div>",
                  '<table id="tables"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>",
                  *body, "</tbody></table>"]
    parts += ["</body></html>", ""]
    return "\n".join(parts)


def table_page_html(table: LakeTable, css_href: str = "static/deltaberg.css") -> str:
    """One table's page: its facts, its lag over time (a bar per moment, oldest first), its recent runs."""
    r = table.row
    facts = [("location", r.uri), ("status", r.status), ("level", r.level), ("errors", r.error_count),
             ("warnings", r.warning_count), ("Delta version", r.delta_version), ("Iceberg version", r.iceberg_version),
             ("lag", r.lag), ("last conversion", r.last_conversion), ("rows", r.rows), ("error", r.error),
             ("assets", " ".join(table.assets) or None)]
    bars = [Bar(_time(p.when), p.lag, r.status, f"{p.lag} (Delta {p.delta_version}, Iceberg "
                f"{'-' if p.iceberg_version is None else p.iceberg_version})") for p in table.history]
    parts = _head(f"{TITLE}: {r.name}", css_href) + [
        f'<p><a href="./">{display.html(TITLE)}</a></p>', f"<h1>{display.html(r.name)}</h1>",
        '<table id="facts"><tbody>' + "".join(f"<tr><th>{k}</th>{_cell(v)}</tr>" for k, v in facts)
        + "</tbody></table>", "<h2>Lag over time</h2>"]
    if bars:
        parts += ['<div class="chart" id="history-chart">',
                  bars_svg(bars, "lag (Delta versions behind Iceberg), oldest first", f"{r.name}: lag over time",
                           legend=False), "</div>"]
    else:
        parts.append('<p id="no-history">No version of this table known at any time yet.</p>')
    parts += ["<h2>Recent runs</h2>", '<ul id="runs">',
              *(f"<li>{display.html(run.text())}</li>" for run in table.runs), "</ul></body></html>", ""]
    return "\n".join(parts)
