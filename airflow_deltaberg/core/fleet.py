"""A fleet of Delta tables: which tables (found under a storage prefix, or listed), and the fleet report (per
table: compliance, Delta version vs the Iceberg ``delta-version``, last conversion, rows). No Airflow: the fleet
DAG (dags_examples/deltaberg_fleet.py) calls these from its tasks."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_deltaberg.core import display
from airflow_deltaberg.core.errors import DeltabergError, FleetDiscoveryError
from airflow_deltaberg.core.redact import location_text
from airflow_deltaberg.core.storage import Storage, open_storage
from airflow_deltaberg.core.watch import iceberg_state, latest_listing, listed_from

DELTA_LOG = "_delta_log"
DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_TABLES = 500
#: Folders a listing never enters: Delta's and Iceberg's own, and hidden ones.
_SKIPPED_PREFIXES = ("_", ".")


@dataclass(frozen=True)
class FleetTable:
    """One table of the fleet: its short name (unique in the fleet) and its location."""

    name: str
    uri: str

    def identifier(self, namespace: str) -> str:
        """``<namespace>.<name>`` with the name's characters outside [a-z0-9_] as ``_`` (a catalog identifier)."""
        return f"{namespace}.{re.sub(r'[^a-z0-9_]', '_', self.name.lower())}"


def discover_prefix(prefix: str, storage_options: Mapping[str, Any] | None = None, *,
                    max_depth: int = DEFAULT_MAX_DEPTH, max_tables: int = DEFAULT_MAX_TABLES) -> list[FleetTable]:
    """The folders under ``prefix`` holding a ``_delta_log`` folder, at most ``max_depth`` levels down, sorted by
    name (the path below the prefix). A table's own folders are not entered; nor are folders starting with ``_``
    or ``.``. FleetDiscoveryError when more than ``max_tables`` are found (never a silent cut) or none."""
    storage = open_storage(prefix, storage_options)
    found: list[FleetTable] = []
    pending: list[tuple[str, int]] = [("", 0)]
    while pending:
        folder, depth = pending.pop()
        children = storage.list_folders(folder)
        if DELTA_LOG in children and folder:
            found.append(FleetTable(folder, storage.uri(folder)))
            if len(found) > max_tables:
                raise FleetDiscoveryError(f"more than {max_tables} Delta tables under {location_text(prefix)}: "
                                          f"raise the bound (max_tables) or split the fleet")
            continue
        if depth >= max_depth:
            continue
        pending += [(f"{folder}/{c}" if folder else c, depth + 1) for c in reversed(children)
                    if not c.startswith(_SKIPPED_PREFIXES)]
    if not found:
        raise FleetDiscoveryError(f"no Delta table (a folder holding {DELTA_LOG}) within {max_depth} levels "
                                  f"under {location_text(prefix)}")
    return sorted(found, key=lambda t: t.name)


def parse_table_list(text: str, *, source: str, max_tables: int = DEFAULT_MAX_TABLES) -> list[FleetTable]:
    """The tables of a list file or an Airflow Variable: a JSON list (of locations, or of ``{"name", "uri"}``
    objects) or one location a line (``#`` comments and blank lines skipped). A table's name defaults to the
    last folder of its location. FleetDiscoveryError (naming ``source``) for a malformed list, an empty one, a
    name given twice, or more than ``max_tables``."""
    stripped = text.strip()
    items: list[Any]
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise FleetDiscoveryError(f"{source}: not a JSON list of tables ({exc})") from None
    else:
        items = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    tables = [_table_of(item, source) for item in items]
    if not tables:
        raise FleetDiscoveryError(f"{source}: lists no table")
    if len(tables) > max_tables:
        raise FleetDiscoveryError(f"{source}: {len(tables)} tables, more than the bound {max_tables}")
    names = [t.name for t in tables]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FleetDiscoveryError(f"{source}: table names given twice: {', '.join(twice)} (name them)")
    return tables


def _table_of(item: Any, source: str) -> FleetTable:
    if isinstance(item, str) and item.strip():
        uri = item.strip()
        return FleetTable(uri.rstrip("/").rsplit("/", 1)[-1], uri)
    if isinstance(item, Mapping) and isinstance(item.get("uri"), str) and item["uri"].strip():
        uri = item["uri"].strip()
        name = item.get("name") or uri.rstrip("/").rsplit("/", 1)[-1]
        return FleetTable(str(name), uri)
    raise FleetDiscoveryError(f"{source}: {display.text(repr(item))[:200]} is not a table location nor a "
                              f"{{\"name\", \"uri\"}} object")


@dataclass(frozen=True)
class FleetRow:
    """One table's line of the fleet report. ``error`` is the failure of its validation or conversion (then the
    other fields hold what could still be read)."""

    name: str
    uri: str
    level: str | None = None
    compliant: bool | None = None
    error_count: int | None = None
    warning_count: int | None = None
    delta_version: int | None = None
    iceberg_version: int | None = None
    last_conversion: str | None = None
    rows: int | None = None
    error: str | None = None

    @property
    def lag(self) -> int | None:
        """Delta versions the Iceberg table is behind; the Delta version + 1 before a first conversion."""
        if self.delta_version is None:
            return None
        return self.delta_version - (self.iceberg_version if self.iceberg_version is not None else -1)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.compliant is None:
            return "unchecked"
        return "compliant" if self.compliant else "not compliant"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lag": self.lag, "status": self.status}


@dataclass(frozen=True)
class TableVersions:
    """What a table says now: its latest Delta version; from its Iceberg metadata (None before a conversion) the
    ``delta-version`` converted, when that metadata was written (ISO 8601, UTC) and the rows of its current
    snapshot (``total-records`` less ``total-position-deletes``: the rows deletion vectors drop); ``commits``: the
    commit files the listing of ``_delta_log`` saw, (version, modification time in ms), oldest first."""

    delta_version: int
    iceberg_version: int | None
    written: str | None
    rows: int | None
    commits: tuple[tuple[int, int], ...] = ()


def table_versions(table: FleetTable, storage_options: Mapping[str, Any] | None = None, *,
                   commits_from: int | None = None) -> TableVersions:
    """What ``table`` says now, from one listing of ``_delta_log``: from ``commits_from`` on when given (its commits
    are those wanted), else from the newest checkpoint on."""
    storage = open_storage(table.uri, storage_options)
    listing = listed_from(storage, table.uri, commits_from) if commits_from is not None else None
    if listing is None or listing.latest_version is None:
        # Nothing from there on (the table was written again since): listed as a watcher does, which says why
        # when the log is gone.
        found, listing = latest_listing(storage, None, table=table.uri)
        delta_version = found.latest_version
    else:
        delta_version = listing.latest_version
    commits = tuple((v, listing.commits[v].mtime_ms) for v in sorted(listing.commits))
    state = iceberg_state(storage, table=table.uri)
    if state.location is None:
        return TableVersions(delta_version, None, None, None, commits)
    written, rows = _metadata_facts(storage)
    return TableVersions(delta_version, state.delta_version, written, rows, commits)


def _metadata_facts(storage: Storage) -> tuple[str | None, int | None]:
    from airflow_deltaberg.core.iceberg import publish

    published = publish.latest_metadata(storage)
    if published is None:
        return None, None
    metadata = published.metadata
    stamp = dt.datetime.fromtimestamp(metadata.last_updated_ms / 1000, tz=dt.timezone.utc)
    snapshot = metadata.current_snapshot()
    summary = snapshot.summary if snapshot is not None and snapshot.summary else None
    rows = None
    if summary is not None and summary.get("total-records") is not None:
        rows = int(summary["total-records"]) - int(summary.get("total-position-deletes") or 0)
    return stamp.isoformat(timespec="seconds"), rows


def fleet_row(table: FleetTable, report: Mapping[str, Any] | None, failure: str | None,
              storage_options: Mapping[str, Any] | None = None) -> FleetRow:
    """A table's report line from its validation report dict (None when the task failed or did not run) and the
    failure text, with the versions and rows read now from the table and its Iceberg metadata."""
    error = failure
    try:
        now: TableVersions | None = table_versions(table, storage_options)
    except DeltabergError as exc:
        now = None
        error = error or f"{type(exc).__name__}: {exc}"
    return FleetRow(
        name=table.name, uri=location_text(table.uri),
        level=report.get("level") if report else None,
        compliant=report.get("compliant") if report else None,
        error_count=report.get("error_count") if report else None,
        warning_count=report.get("warning_count") if report else None,
        delta_version=now.delta_version if now else None, iceberg_version=now.iceberg_version if now else None,
        last_conversion=now.written if now else None, rows=now.rows if now else None, error=error,
    )


@dataclass(frozen=True)
class FleetReport:
    """The fleet's report: one row per table, in fleet order."""

    rows: tuple[FleetRow, ...]
    generated: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))

    def counts(self) -> dict[str, int]:
        statuses = [r.status for r in self.rows]
        return {s: statuses.count(s) for s in ("compliant", "not compliant", "unchecked", "failed")}

    def summary(self) -> str:
        counts = self.counts()
        lagging = sum(1 for r in self.rows if r.lag)
        return (f"fleet of {len(self.rows)} tables: {counts['compliant']} compliant, {counts['not compliant']} not "
                f"compliant, {counts['failed']} failed, {lagging} behind Delta")

    def to_dict(self) -> dict[str, Any]:
        return {"generated": self.generated, "summary": self.summary(), "counts": self.counts(),
                "tables": [r.to_dict() for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_markdown(self) -> str:
        lines = [self.summary(), "", "| table | status | level | errors | warnings | Delta | Iceberg | lag | rows |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            cells = [r.name, r.status, r.level, r.error_count, r.warning_count, r.delta_version, r.iceberg_version,
                     r.lag, r.rows]
            lines.append("| " + " | ".join(display.markdown(_cell(c)) for c in cells) + " |")
        failed = [r for r in self.rows if r.error]
        if failed:
            lines += ["", "Failures:"] + [f"- {display.text(r.name)}: {display.text(r.error or '')}" for r in failed]
        return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def fleet_report(rows: Iterable[FleetRow]) -> FleetReport:
    return FleetReport(tuple(rows))


def names(tables: Sequence[FleetTable]) -> list[str]:
    return [t.name for t in tables]
