"""What the "Delta -> Iceberg" page shows, gathered from Airflow's metadata DB and the tables themselves.

From the DB (read-only, bounded to the newest ``LIMIT`` rows of each query):

- the task instances of the provider's converting and validating operators, with their XComs: a conversion's
  ``return_value`` (table, delta_version, identifier, records), a validation's ``compliance_report``; a failed
  mapped task is placed by its map label (the fleet DAG names each map index by the table's location);
- the asset events on ``iceberg://`` and ``delta://`` assets, and those whose extra holds ``delta_version`` (a
  conversion registered by location): the extra's keys are read when present (delta_version, snapshot_id, mode,
  files_added, records; the watcher's payload with its versions), never required; an event whose extra does not
  name the table is placed through its source task's conversion result.

From each table found (a thread each, at most ``READ_SECONDS`` in all, cached ``CACHE_SECONDS``): its latest Delta
version and commit times (one listing of ``_delta_log``) and its Iceberg metadata (``delta-version``, when written,
rows), read with the api-server's own credentials. A table that cannot be read shows the error and what the DB
knows."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.core.fleet import FleetRow, FleetTable, TableVersions, table_versions
from airflow_deltaberg.core.lake_page import LagPoint, LakeTable, Run, lag_history
from airflow_deltaberg.core.redact import location_text

#: Operator class names (the task instance's ``operator`` column) by what they do to a table.
CONVERTERS = ("DeltaToIcebergOperator", "DeltaIcebergRegenerateOperator")
VALIDATORS = ("DeltaValidateOperator",)
LIMIT = 2000
READ_SECONDS = 15.0
CACHE_SECONDS = 30.0
RUNS_SHOWN = 10

_cache: dict[str, tuple[float, Any]] = {}
_cache_lock = threading.Lock()


def location_key(location: str) -> str:
    """One spelling per table location: ``file://`` + absolute path for local paths, no trailing ``/``."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        path = unquote(parts.path) if parts.scheme else location
        return "file://" + os.path.abspath(path).rstrip("/")
    return location.rstrip("/")


def readable(key: str) -> str:
    """The location to open: the path of a ``file://`` key, the key otherwise."""
    return unquote(urlsplit(key).path) if key.startswith("file://") else key


def delta_asset_location(uri: str) -> str | None:
    """The table location of a ``delta://<scheme>/<path>`` asset (``delta://file/<path>`` is a local path)."""
    parts = urlsplit(uri)
    if parts.scheme != "delta" or not parts.netloc:
        return None
    path = unquote(parts.path).lstrip("/")
    return f"/{path}" if parts.netloc == "file" else f"{parts.netloc}://{path}"


@dataclass
class _Facts:
    """What the DB says of one table, gathered before it is read."""

    key: str
    location: str | None
    identifier: str | None = None
    assets: set[str] = field(default_factory=set)
    conversions: list[tuple[dt.datetime, int, int | None]] = field(default_factory=list)  # when, version, records
    versions_seen: list[tuple[dt.datetime, int]] = field(default_factory=list)
    validation: tuple[dt.datetime, Mapping[str, Any]] | None = None
    runs: list[Run] = field(default_factory=list)
    sources: set[tuple[str, str, str, int]] = field(default_factory=set)


def _when(value: dt.datetime | None) -> dt.datetime:
    if value is None:
        return dt.datetime.now(dt.timezone.utc)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json(value: Any) -> Any:
    from airflow.models.xcom import XComModel

    try:
        return XComModel.deserialize_value(type("Row", (), {"value": value})())
    except Exception:  # a value of another XCom backend, or not JSON: not ours to read
        return value


class _Collector:
    def __init__(self) -> None:
        self.tables: dict[str, _Facts] = {}
        #: table key of each source task instance (dag, run, task, map index) that converted or validated
        self.by_source: dict[tuple[str, str, str, int], str] = {}

    def facts(self, location: str) -> _Facts:
        key = location_key(location)
        if key not in self.tables:
            self.tables[key] = _Facts(key, location)
        return self.tables[key]

    def task_row(self, row: Mapping[str, Any]) -> None:
        kind = "convert" if row["operator"] in CONVERTERS else "validate"
        source = (row["dag_id"], row["run_id"], row["task_id"], row["map_index"])
        when = _when(row["end_date"] or row["start_date"])
        value = _json(row["value"]) if row["value"] is not None else None
        location = value.get("table") if isinstance(value, Mapping) else None
        if not isinstance(location, str):
            location = self.by_source.get(source) or row["rendered_map_index"]
            location = readable(location) if location and location.startswith("file://") else location
        if not location or (row["rendered_map_index"] == location and "/" not in location):
            return  # nothing says which table (an unmapped task that failed before its result)
        facts = self.facts(location)
        self.by_source[source] = facts.key
        if source not in facts.sources:
            facts.sources.add(source)
            facts.runs.append(Run(kind, row["dag_id"], row["run_id"], row["task_id"], row["state"], when,
                                  row["rendered_map_index"] if row["map_index"] >= 0 else None))
        if not isinstance(value, Mapping):
            return
        if kind == "convert" and row["key"] == "return_value":
            version = _int(value.get("delta_version"))
            if version is not None:
                facts.conversions.append((when, version, _int(value.get("records"))))
            if isinstance(value.get("identifier"), str):
                facts.identifier = value["identifier"]
        elif kind == "validate" and row["key"] == "compliance_report":
            if facts.validation is None or facts.validation[0] < when:
                facts.validation = (when, value)
            version = _int(value.get("version"))
            if version is not None:
                facts.versions_seen.append((when, version))

    def asset_event(self, uri: str, extra: Any, when: dt.datetime, source: tuple[Any, ...]) -> None:
        extra = extra if isinstance(extra, Mapping) else {}
        payload = extra.get("payload") if isinstance(extra.get("payload"), Mapping) else {}
        location = extra.get("table") or payload.get("table") or delta_asset_location(uri)
        key = self.by_source.get(source) if all(s is not None for s in source) else None
        if not isinstance(location, str) and key is None:
            if uri.startswith("file://") and "delta_version" in extra:
                location = uri
            else:
                return  # an event of another producer on an iceberg:// asset we cannot place
        facts = self.tables[key] if key and not isinstance(location, str) else self.facts(location)
        facts.assets.add(uri)
        when = _when(when)
        version = _int(extra.get("delta_version"))
        if version is not None and source not in facts.sources and not uri.startswith("delta://"):
            facts.conversions.append((when, version, _int(extra.get("records"))))  # a producer of ours not seen
        elif version is not None:
            facts.versions_seen.append((when, version))
        for name in ("to_version", "latest_version"):
            seen = _int(payload.get(name)) if payload else _int(extra.get(name))
            if seen is not None:
                facts.versions_seen.append((when, seen))
        if "compliant" in extra and (facts.validation is None or facts.validation[0] < when):
            facts.validation = (when, extra)


def _task_rows(session: Any, limit: int) -> list[Mapping[str, Any]]:
    import sqlalchemy as sa
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel

    ti, xc = TaskInstance.__table__.c, XComModel.__table__.c
    joined = TaskInstance.__table__.outerjoin(XComModel.__table__, sa.and_(
        xc.dag_id == ti.dag_id, xc.run_id == ti.run_id, xc.task_id == ti.task_id, xc.map_index == ti.map_index,
        xc.key.in_(("return_value", "compliance_report"))))
    query = (sa.select(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.rendered_map_index, ti.operator, ti.state,
                       ti.start_date, ti.end_date, xc.key, xc.value)
             .select_from(joined).where(ti.operator.in_(CONVERTERS + VALIDATORS))
             .order_by(sa.func.coalesce(ti.end_date, ti.start_date).desc()).limit(limit))
    return [dict(r._mapping) for r in session.execute(query)]


def _event_rows(session: Any, limit: int) -> list[Mapping[str, Any]]:
    import sqlalchemy as sa
    from airflow.models.asset import AssetEvent, AssetModel

    ev, asset = AssetEvent.__table__.c, AssetModel.__table__.c
    query = (sa.select(asset.uri, ev.extra, ev.timestamp, ev.source_dag_id, ev.source_run_id, ev.source_task_id,
                       ev.source_map_index)
             .select_from(AssetEvent.__table__.join(AssetModel.__table__, asset.id == ev.asset_id))
             .where(sa.or_(asset.uri.like("iceberg://%"), asset.uri.like("delta://%"),
                           sa.cast(ev.extra, sa.String).like('%"delta_version"%')))
             .order_by(ev.timestamp.desc()).limit(limit))
    return [dict(r._mapping) for r in session.execute(query)]


@dataclass(frozen=True)
class _Read:
    versions: TableVersions | None
    commits: tuple[tuple[dt.datetime, int], ...]
    error: str | None


def _read_table(location: str, first_version: int | None) -> _Read:
    """The table now, and the commit times of the versions from ``first_version`` on (the newest 200), from one
    listing of ``_delta_log`` (from the newest checkpoint on when no conversion is known)."""
    start = None if first_version is None else max(0, first_version - 1)
    try:
        versions = table_versions(FleetTable(location, location), commits_from=start)
    except DeltabergError as exc:
        return _Read(None, (), f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a store's own failure: shown for the table, never the page's
        return _Read(None, (), f"cannot read {location_text(location)}: {type(exc).__name__}")
    commits = tuple((dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc), version)
                    for version, ms in versions.commits[-200:])
    return _Read(versions, commits, None)


def _cached_reads(wanted: Mapping[str, int | None]) -> dict[str, _Read]:
    now = time.monotonic()
    found: dict[str, _Read] = {}
    with _cache_lock:
        for key in wanted:
            hit = _cache.get(key)
            if hit and hit[0] > now:
                found[key] = hit[1]
    missing = [k for k in wanted if k not in found]
    if not missing:
        return found
    pool = ThreadPoolExecutor(max_workers=min(8, len(missing)), thread_name_prefix="deltaberg-ui")
    futures = {pool.submit(_read_table, readable(k), wanted[k]): k for k in missing}
    done, _ = wait(futures, timeout=READ_SECONDS)
    pool.shutdown(wait=False, cancel_futures=True)
    with _cache_lock:
        for future, key in futures.items():
            if future in done:
                found[key] = future.result()
                _cache[key] = (now + CACHE_SECONDS, found[key])
            else:
                found[key] = _Read(None, (), f"not read within {READ_SECONDS:.0f} s")
    return found


def _name(facts: _Facts) -> str:
    if facts.identifier:
        return facts.identifier
    return (facts.location or facts.key).rstrip("/").rsplit("/", 1)[-1] or facts.key


def _table(facts: _Facts, read: _Read | None) -> LakeTable:
    conversions = sorted(facts.conversions)
    last = conversions[-1] if conversions else None
    now = read.versions if read else None
    report = facts.validation[1] if facts.validation else None
    runs = sorted(facts.runs, key=lambda r: r.when or dt.datetime.min.replace(tzinfo=dt.timezone.utc), reverse=True)
    error = read.error if read else None
    if runs and runs[0].state == "failed":
        error = "; ".join(e for e in (f"last run failed: {runs[0].text()}", error) if e)
    seen = [*facts.versions_seen, *(read.commits if read else ())]
    converted = [(when, version) for when, version, _ in conversions]
    if now is not None:
        moment = dt.datetime.now(dt.timezone.utc)
        seen.append((moment, now.delta_version))
        if now.iceberg_version is not None and (last is None or last[1] != now.iceberg_version):
            converted.append((dt.datetime.fromisoformat(now.written) if now.written else moment, now.iceberg_version))
    known = max([v for _, v in seen] + [v for _, v in converted] + [-1])
    row = FleetRow(
        name=_name(facts), uri=location_text(facts.location or facts.key),
        level=report.get("level") if report else None, compliant=report.get("compliant") if report else None,
        error_count=report.get("error_count") if report else None,
        warning_count=report.get("warning_count") if report else None,
        delta_version=now.delta_version if now else (known if known >= 0 else None),
        iceberg_version=now.iceberg_version if now else (last[1] if last else None),
        last_conversion=(now.written if now and now.written else
                         last[0].isoformat(timespec="seconds") if last else None),
        rows=now.rows if now and now.rows is not None else (last[2] if last else None), error=error)
    history: tuple[LagPoint, ...] = tuple(lag_history(converted, seen))
    return LakeTable(facts.key, row, tuple(sorted(facts.assets)), runs[0] if runs else None,
                     tuple(runs[:RUNS_SHOWN]), history)


def gather(session: Any, *, limit: int = LIMIT, read: bool = True) -> list[LakeTable]:
    """Every table the provider's tasks and asset events name, sorted by name (``read``: also read each table)."""
    collector = _Collector()
    for row in reversed(_task_rows(session, limit)):
        collector.task_row(row)
    for event in _event_rows(session, limit):
        source = (event["source_dag_id"], event["source_run_id"], event["source_task_id"], event["source_map_index"])
        collector.asset_event(event["uri"], event["extra"], event["timestamp"], source)
    facts = [f for f in collector.tables.values()]
    reads = _cached_reads({f.key: min((v for _, v, _ in f.conversions), default=None) for f in facts
                           if f.location}) if read else {}
    return sorted((_table(f, reads.get(f.key)) for f in facts), key=lambda t: t.row.name)


def find(tables: Iterable[LakeTable], key: str) -> LakeTable | None:
    return next((t for t in tables if t.key == key), None)
