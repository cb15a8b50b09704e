"""The fleet report as one HTML page: a chart of compliance and lag per table (inline SVG drawn here: no script,
no stylesheet or font from elsewhere, so it renders with no network) above the table of every row. The bar chart
(``bars_svg``) also draws the plugin page's lag over time (core/lake_page.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_deltaberg.core import display
from airflow_deltaberg.core.fleet import FleetReport, FleetRow

#: Bar colour per status.
COLOURS = {"compliant": "#2e7d32", "not compliant": "#ef6c00", "unchecked": "#757575", "failed": "#c62828"}
_BAR_HEIGHT = 18
_LABEL_WIDTH = 260
_CHART_WIDTH = 420


@dataclass(frozen=True)
class Bar:
    """One row of a bar chart: its label, its value (None: nothing to draw), its status (the colour) and the text
    shown after the bar."""

    label: str
    value: int | None
    status: str
    text: str


def bars_svg(bars: Sequence[Bar], caption: str, title: str, *, legend: bool = True) -> str:
    """A horizontal bar chart as inline SVG: one row per bar (``<g class="bar" data-label=...>``), bars scaled to
    the longest, coloured by status, a legend of the statuses below (``legend``)."""
    longest = max([b.value or 0 for b in bars] + [1])
    height = _BAR_HEIGHT * (len(bars) + (2 if legend else 1))
    width = _LABEL_WIDTH + _CHART_WIDTH + 80
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             f'<title>{display.html(title)}</title>',
             f'<text x="{_LABEL_WIDTH}" y="12" fill="#333">{display.html(caption)}</text>']
    for i, bar in enumerate(bars):
        parts.append(_bar(bar, _BAR_HEIGHT * (i + 1), longest))
    legend_y = _BAR_HEIGHT * (len(bars) + 1) + 12
    x = 0
    for status, colour in COLOURS.items() if legend else ():
        parts.append(f'<rect x="{x}" y="{legend_y - 10}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{legend_y}">{status}</text>')
        x += 120
    parts.append("</svg>")
    return "\n".join(parts)


def _bar(bar: Bar, y: int, longest: int) -> str:
    colour = COLOURS.get(bar.status, COLOURS["unchecked"])
    length = 0 if not bar.value else max(2, round(_CHART_WIDTH * bar.value / longest))
    label = display.html(bar.label)
    return (f'<g class="bar" data-label="{label}" data-status="{display.html(bar.status)}">'
            f'<text x="{_LABEL_WIDTH - 6}" y="{y + 13}" text-anchor="end">{label}</text>'
            f'<rect x="{_LABEL_WIDTH}" y="{y + 3}" width="{length}" height="{_BAR_HEIGHT - 6}" fill="{colour}">'
            f'<title>{label}: {display.html(bar.status)}, {display.html(bar.text)}</title></rect>'
            f'<text x="{_LABEL_WIDTH + length + 4}" y="{y + 13}">{display.html(bar.text)}</text></g>')


def table_bar(row: FleetRow) -> Bar:
    """A table's bar: its lag, coloured by its status (``failed`` as text when the lag could not be read)."""
    lag = row.lag
    text = "failed" if row.status == "failed" and lag is None else "-" if lag is None else str(lag)
    return Bar(row.name, lag, row.status, text)


def chart_svg(report: FleetReport) -> str:
    """One row per table: its name, a bar as long as its lag (Delta versions behind Iceberg) coloured by its
    status, and the lag as text (``failed`` when it could not be read)."""
    return bars_svg([table_bar(r) for r in report.rows], "lag (Delta versions behind Iceberg)", report.summary())


def report_html(report: FleetReport, title: str = "Delta -> Iceberg fleet") -> str:
    """The whole page: summary, chart, then a table with one row per table (``<tr data-table=name>``)."""
    head = ["table", "status", "level", "errors", "warnings", "Delta version", "Iceberg version", "lag",
            "last conversion", "rows", "error"]
    rows = []
    for r in report.rows:
        cells = [r.name, r.status, r.level, r.error_count, r.warning_count, r.delta_version, r.iceberg_version,
                 r.lag, r.last_conversion, r.rows, r.error]
        rows.append(f'<tr data-table="{display.html(r.name)}" style="color:{COLOURS[r.status]}">'
                    + "".join(f"<td>{display.html('-' if c is None else c)}</td>" for c in cells) + "</tr>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{display.html(title)}</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style></head><body>",
        f"<h1>{display.html(title)}</h1>",
        f'<p id="summary">{display.html(report.summary())} (generated {display.html(report.generated)})</p>',
        chart_svg(report),
        '<table id="fleet"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>",
        *rows, "</tbody></table></body></html>", ""])
