"""Which Iceberg snapshots a conversion keeps: only ones that read as Delta's version still reads.

Every run expires, besides what the count and age bounds drop (``retention_rules``), each snapshot that no longer
reads (``unreadable_snapshots``):

- its Delta version left the log: older than the oldest version the log can still rebuild (its commit and every
  later one still there, or a checkpoint and the commits after it), or committed before now minus
  ``delta.logRetentionDuration`` (default 30 days), after which Delta's log cleanup may drop it any time;
- a data file it reads is gone: Delta's VACUUM deletes files that a ``remove`` took out of the table (after
  ``delta.deletedFileRetentionDuration``, default 7 days, or at once when forced). A snapshot reads the files
  live at its version; those still live now are Delta's current files, so only the files removed after it
  can be missing. The commits after the oldest kept snapshot are read (a few per snapshot when the table is
  converted after every commit) and each file they remove is checked for existence once, newest first;
  removal times are not trusted (a forced VACUUM ignores them);
- its schema no longer reads by name (``conflicting_schemas``): a column name that the table's name mapping now
  gives another field id (a column whose type changed incompatibly got a new id).

The current snapshot always stays.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.table.snapshots import Operation, Snapshot

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.file_checks.file_footer import data_file_location, data_file_storage
from airflow_deltaberg.core.delta.log.log_segment import ListedLog, LogListing, list_log
from airflow_deltaberg.core.delta.log.retention import DEFAULT_LOG_RETENTION_MS, LOG_RETENTION, retention_ms
from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.core.iceberg.expire import Expiry, expire_snapshot_ids, snapshots_to_expire
from airflow_deltaberg.core.iceberg.publish import PublishedMetadata
from airflow_deltaberg.core.iceberg.schema_history import conflicting_schemas
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TIMESTAMP, DELTA_VERSION, TableMetadata
from airflow_deltaberg.core.iceberg.table_properties import MAX_SNAPSHOTS

log = logging.getLogger(__name__)

#: Iceberg table property: the most snapshots a conversion keeps when no count or age is asked for (trimmed to it
#: once a tenth more are there: expiring reads the conversion state of every snapshot kept). Each
#: snapshot is ~0.7 KB of every metadata.json, which each run parses and writes again (and the kept copies of
#: earlier metadata files multiply it), and each kept snapshot's Delta commit is read again by every run's
#: VACUUM check: 100 keeps a run's cost flat and covers a day of hourly conversions or the last 100 commits of a
#: table converted after each one, inside Delta's own default time travel (7 days of removed files).
DEFAULT_MAX_SNAPSHOTS = 100


@dataclass(frozen=True)
class RetentionRules:
    """The count and age bounds of a run: keep the ``retain_last`` newest, drop the others older than
    ``older_than_ms`` (any age when None); by the default bound only once more than ``retain_last + slack``
    are there (so that expiry, which reads every retained snapshot's state, runs once in ``slack`` runs)."""

    retain_last: int
    older_than_ms: int | None
    slack: int = 0


def retention_rules(metadata: TableMetadata, *, retain_snapshots: int | None, max_snapshot_age_ms: int | None,
                    now_ms: int) -> RetentionRules:
    """The explicit options when given (as before), else the table's ``deltaberg.history.max-snapshots``."""
    if retain_snapshots is not None or max_snapshot_age_ms is not None:
        older_than = None if max_snapshot_age_ms is None else now_ms - max_snapshot_age_ms
        return RetentionRules(max(retain_snapshots or 1, 1), older_than)
    raw = metadata.properties.get(MAX_SNAPSHOTS, str(DEFAULT_MAX_SNAPSHOTS))
    try:
        count = int(raw)
    except ValueError as exc:
        raise DeltabergError(f"the Iceberg table property {MAX_SNAPSHOTS} is {raw!r}, not a number") from exc
    return RetentionRules(max(count, 1), None, max(count, 1) // 10)


def _delta_commit(snapshot: Snapshot) -> tuple[int | None, int]:
    """The Delta version (None when not recorded) and commit time (the snapshot's own when not recorded) of a
    snapshot. Its summary's properties are taken once: each pydantic attribute access of a summary costs ~5 us,
    and a run looks at every retained snapshot."""
    summary = snapshot.summary
    properties = summary.additional_properties if summary is not None else {}
    version = properties.get(DELTA_VERSION)
    timestamp = properties.get(DELTA_TIMESTAMP)
    return (int(version) if version is not None and version.isdigit() else None,
            int(timestamp) if timestamp is not None and timestamp.lstrip("-").isdigit() else snapshot.timestamp_ms)


def oldest_rebuildable(listing: LogListing, listed_from: int) -> int | None:
    """The oldest version at or after ``listed_from`` that the log (listed from there) can rebuild: its commit and
    every later one are there, or a checkpoint of it or later and every commit after it. Delta's log cleanup
    deletes the files below a checkpoint it keeps, oldest first, so a commit still there with every later one
    is one the log rebuilds (no listing of the older log is needed). None for an empty listing."""
    latest = listing.latest_version
    if latest is None:
        return None
    low = latest + 1
    while low - 1 in listing.commits and low - 1 >= listed_from:
        low -= 1
    checkpoints = [c.version for c in listing.checkpoints if c.version >= low - 1]
    return min([low, *checkpoints]) if low <= latest else min(checkpoints, default=latest)


def appended_alone(versions: Mapping[int, Snapshot]) -> set[int]:
    """Delta versions whose commit removed no file, as the table's own snapshots (``versions``: Delta version ->
    snapshot) say: an incremental snapshot of that commit alone (one at the version before exists) whose operation
    is append (files only added: no data file deleted, no delete file added)."""
    return {v for v, s in versions.items()
            if v - 1 in versions and s.summary is not None and s.summary.operation == Operation.APPEND}


def _vacuumed(table: DeltaTable, by_version: Mapping[int, Snapshot], versions: dict[int, int],
              current_version: int, listed: ListedLog | None = None) -> set[int]:
    """Snapshots (of ``versions``: id -> Delta version, older than ``current_version``) that read a data file a
    later commit removed and that is gone; ``by_version``: every snapshot by its Delta version. No commit is read
    when the snapshots say none of them removed a file (``appended_alone``): an append-only table costs nothing
    here."""
    if not versions:
        return set()
    start = min(versions.values()) + 1
    if set(range(start, current_version + 1)) <= appended_alone(by_version):
        return set()
    try:
        actions = table.commits(start, current_version, listed=listed).actions.file_actions
    except DeltabergError as exc:
        if exc.retryable:
            raise  # a transient store fault says nothing of the files: expiring on it would lose history for good
        # Commits this run cannot read leave the files of these snapshots unknown: none is kept unchecked.
        log.warning("%s: the commits after Delta version %d cannot be read (%s): the snapshots before version %d "
                    "expire", table.location, start - 1, exc, current_version)
        return set(versions)
    actions = actions.select(["version", "is_add", "path"])
    version_col = actions.column("version").to_pylist()
    is_add = actions.column("is_add").to_pylist()
    paths = actions.column("path").to_pylist()
    # For each removal: the versions its file was live at, [first add since the last removal, removal) (from before
    # the range when it was added earlier; an add of a live path, e.g. a row tracking backfill, does not start a
    # new life). A commit's remove ends the earlier life before its add of the same path begins.
    added: dict[str, int] = {}
    lives: list[tuple[int, int, str]] = []  # (removed at, live from, path)
    order = sorted(range(len(paths)), key=lambda i: (version_col[i], is_add[i]))
    for i in order:
        if is_add[i]:
            added.setdefault(paths[i], version_col[i])
        else:
            lives.append((version_col[i], added.pop(paths[i], -1), paths[i]))
    unreadable: set[int] = set()
    checked: dict[str, bool] = {}
    for removed_at, live_from, path in sorted(lives, reverse=True):
        readers = {sid for sid, v in versions.items() if live_from <= v < removed_at and sid not in unreadable}
        if not readers:
            continue
        if path not in checked:
            try:
                storage, key = data_file_storage(table.storage, data_file_location(table.storage, path))
            except DeltabergError:  # a path that names no file of the table: nothing to read there
                checked[path] = False
            else:
                checked[path] = storage.exists(key)
        if not checked[path]:
            unreadable |= readers
    return unreadable


def unreadable_snapshots(table: DeltaTable, metadata: TableMetadata, candidates: set[int],
                         configuration: Mapping[str, str], now_ms: int,
                         listed: ListedLog | None = None) -> dict[int, str]:
    """The snapshots of ``candidates`` (never the current one) that no longer read as Delta does, with why; the log
    is listed unless ``listed`` (this run's listing) covers their versions."""
    current = metadata.current_snapshot_id
    # Each snapshot's Delta version is read once (pydantic attribute access of a summary is slow).
    of_snapshot = {s.snapshot_id: (s, *_delta_commit(s)) for s in metadata.snapshots}
    snapshots = {sid: s for sid, (s, _, _) in of_snapshot.items() if sid in candidates and sid != current}
    versions = {sid: v for sid in snapshots if (v := of_snapshot[sid][1]) is not None}
    out: dict[int, str] = {}
    if not versions:
        return out
    start = min(versions.values())
    listing = (listed.since(start) if listed is not None else None) or list_log(table.storage, start)
    oldest = oldest_rebuildable(listing, start)
    try:
        cutoff = now_ms - retention_ms(configuration, LOG_RETENTION, DEFAULT_LOG_RETENTION_MS)
    except ValueError:
        log.warning("%s: %s is %r, not an interval: no snapshot expires for its age", table.location,
                    LOG_RETENTION, configuration.get(LOG_RETENTION))
        cutoff = None
    for sid, version in versions.items():
        if oldest is not None and version < oldest:
            out[sid] = "its Delta version left the log"
        elif cutoff is not None and of_snapshot[sid][2] < cutoff:
            out[sid] = f"its Delta commit is older than {LOG_RETENTION}"
    for sid in conflicting_schemas(metadata, set(snapshots) - set(out)):
        out[sid] = "a column name of its schema now names another field id"
    current_version = of_snapshot[current][1] if current in of_snapshot else None
    if current_version is not None:
        left = {sid: v for sid, v in versions.items() if sid not in out and v < current_version}
        by_version = {v: s for s, v, _ in of_snapshot.values() if v is not None}
        for sid in _vacuumed(table, by_version, left, current_version, listed):
            out[sid] = "a data file it reads was removed by VACUUM"
    return out


def expire_history(table: DeltaTable, published: PublishedMetadata, *, configuration: Mapping[str, str],
                   retain_snapshots: int | None, max_snapshot_age_ms: int | None, now_ms: int,
                   version: int | None = None, listed: ListedLog | None = None) -> Expiry:
    """Expire what the bounds drop and every snapshot that no longer reads (module docstring); new metadata is
    published as ``version`` (by default the one after ``published``)."""
    metadata = published.metadata
    rules = retention_rules(metadata, retain_snapshots=retain_snapshots, max_snapshot_age_ms=max_snapshot_age_ms,
                            now_ms=now_ms)
    expired: set[int] = set()
    if len(metadata.snapshots) > rules.retain_last + rules.slack:
        expired = snapshots_to_expire(metadata, older_than_ms=rules.older_than_ms, retain_last=rules.retain_last)
    kept = {s.snapshot_id for s in metadata.snapshots} - expired
    unreadable = unreadable_snapshots(table, metadata, kept, configuration, now_ms, listed)
    for reason in sorted(set(unreadable.values())):
        log.info("%s: %d Iceberg snapshots expire: %s", table.location,
                 sum(1 for r in unreadable.values() if r == reason), reason)
    return expire_snapshot_ids(table.storage, published, expired | set(unreadable), version=version)

