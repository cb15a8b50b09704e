"""Has a Delta table moved past a known version? Answered with a fixed number of storage calls.

A poll reads ``_delta_log/_last_checkpoint`` (one read) and lists ``_delta_log`` once, starting at the later
of the known version and that checkpoint, so neither the number of calls nor the number of keys listed grows
with the length of the log. Only the error paths (nothing at or after the known version) list more, once,
to tell a vanished table from a start version the table never reached. The start version can come from the
table's Iceberg metadata: its version hint and the metadata file it names are read, not listed.

Which files prove a version: a published commit ``<v>.json`` or a checkpoint of ``<v>`` in ``_delta_log``.
Checkpoints, checksums (``<v>.crc``) and log compactions of version ``v`` sort before ``<v>.json``
('.c' < '.j', digits < 'j'), and the listing starts at the bare 20-digit prefix of the known version, so
all of its files and everything newer are seen. Files in ``_delta_log/_staged_commits`` (catalog-managed
tables) and ``_delta_log/_commits`` (the withdrawn coordinated-commits design), named
``<v>.<uuid>.json``, are never counted: their existence does not mean the commit was ratified (the catalog
decides, and it may have rejected them); only a published ``<v>.json`` does. The listing of ``_delta_log``
is not recursive, so they are not even seen. For catalog-managed tables this means ratified commits are
seen once they are published.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pyiceberg.exceptions import ValidationError as IcebergValidationError

from airflow_deltaberg.core.delta.log.log_segment import LAST_CHECKPOINT, LOG_DIR, LogListing, read_last_checkpoint
from airflow_deltaberg.core.errors import (
    DeltabergError,
    IcebergStartError,
    NotADeltaTableError,
    StorageError,
    VersionNotFoundError,
)
from airflow_deltaberg.core.iceberg import publish
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TABLE_ID, DELTA_VERSION
from airflow_deltaberg.core.storage import Storage

#: Where the start version of a poll came from (named in messages and in the result).
START_GIVEN = "version"
START_ICEBERG = "iceberg"
START_PREVIOUS_RUN = "previous_run"
START_LAST_EVENT = "last_event"


@dataclass(frozen=True)
class NewCommits:
    """The versions a table gained after ``start_version`` (None: no version handled yet, every commit is new).

    ``from_version``..``to_version`` (inclusive) is the range of new versions; empty when ``count`` is 0.
    """

    table: str
    start_version: int | None
    start_from: str
    latest_version: int

    @property
    def from_version(self) -> int:
        return 0 if self.start_version is None else self.start_version + 1

    @property
    def to_version(self) -> int:
        return self.latest_version

    @property
    def count(self) -> int:
        return self.latest_version - (-1 if self.start_version is None else self.start_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "new_commits": self.count,
            "start_version": self.start_version,
            "start_from": self.start_from,
        }


def _start_description(start_version: int, start_from: str, source_file: str | None) -> str:
    if start_from == START_ICEBERG:
        return f"start version {start_version} (the delta-version of the Iceberg metadata {source_file})"
    if start_from == START_PREVIOUS_RUN:
        return f"start version {start_version} (the to_version of the previous run)"
    if start_from == START_LAST_EVENT:
        return f"start version {start_version} (the to_version of the watcher's last event)"
    return f"start version {start_version}"


def listed_from(storage: Storage, table: str, from_version: int) -> LogListing:
    """The parsed listing of ``_delta_log`` from ``from_version`` on (its own files included); all when < 0."""
    start_after = f"{from_version:020d}" if from_version >= 0 else None
    try:
        return LogListing.parse(storage.list_from(LOG_DIR, start_after))
    except StorageError as exc:
        raise type(exc)(f"table {table}: cannot list {storage.uri(LOG_DIR)}: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"table {table}: cannot list {storage.uri(LOG_DIR)}: {exc}") from exc


def _checkpoint_hint(storage: Storage, table: str) -> int | None:
    try:
        return read_last_checkpoint(storage, table)
    except StorageError as exc:
        raise type(exc)(f"table {table}: cannot read {storage.uri(LAST_CHECKPOINT)}: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"table {table}: cannot read {storage.uri(LAST_CHECKPOINT)}: {exc}") from exc


def latest_version_after(
    storage: Storage,
    start_version: int | None,
    *,
    table: str | None = None,
    start_from: str = START_GIVEN,
    source_file: str | None = None,
) -> NewCommits:
    """``latest_listing``'s versions."""
    return latest_listing(storage, start_version, table=table, start_from=start_from, source_file=source_file)[0]


def latest_listing(
    storage: Storage,
    start_version: int | None,
    *,
    table: str | None = None,
    start_from: str = START_GIVEN,
    source_file: str | None = None,
) -> tuple[NewCommits, LogListing]:
    """The newest version of the table, how many versions came after ``start_version``, and the listing of
    ``_delta_log`` that says so (from the later of ``start_version`` and the checkpoint on).

    Costs one read of ``_last_checkpoint`` and one listing of ``_delta_log`` (two when that file points at
    a checkpoint that is gone). Raises NotADeltaTableError when the table has no log (never created, or
    deleted since), VersionNotFoundError when the table never reached ``start_version`` (it was replaced,
    or the start version is wrong), StorageError when the storage cannot be read.
    """
    table = table or storage.root
    if start_version is not None and start_version < 0:
        raise ValueError(f"start version must not be negative, got {start_version}")
    known = -1 if start_version is None else start_version
    hint = _checkpoint_hint(storage, table)
    # Listing from the newest checkpoint bounds the keys read when the known version is far behind.
    first = max(known, hint) if hint is not None else known
    listing = listed_from(storage, table, first)
    latest = listing.latest_version
    if latest is None and first > known:
        # `_last_checkpoint` points at a checkpoint that is no longer there: list from the known version.
        listing = listed_from(storage, table, known)
        latest = listing.latest_version
    if latest is not None:
        return NewCommits(table, start_version, start_from, latest), listing
    whole = listing if known < 0 else listed_from(storage, table, -1)
    latest = whole.latest_version
    if latest is None:
        raise NotADeltaTableError(
            f"no Delta table here: {LOG_DIR} holds no commit or checkpoint (the table was never created, "
            "or it was deleted); check the location",
            table=table,
            file=storage.uri(LOG_DIR),
        )
    raise VersionNotFoundError(
        f"the {_start_description(known, start_from, source_file)} is newer than the table's latest version "
        f"{latest}: the table was replaced (deleted and created again) or the start version is wrong",
        table=table,
        version=known,
        file=storage.uri(LOG_DIR),
    )


def unchanged_since(storage: Storage, version: int, *, table: str | None = None) -> bool:
    """Whether ``version`` is still the table's newest version: one listing of ``_delta_log`` from it.

    A watcher that found no batch (or reported one) at ``version`` asks this first: while it holds, a full poll
    could only find the same versions again (the Iceberg ``delta-version`` can move, but not past ``version``),
    so neither ``_last_checkpoint`` nor the Iceberg metadata needs reading. False when there is anything newer,
    and when ``version`` is gone (the table was deleted or replaced): the full poll then says which.
    """
    listing = listed_from(storage, table or storage.root, version)
    return listing.latest_version == version


@dataclass(frozen=True)
class IcebergState:
    """What a table's Iceberg metadata says it was converted from (all None before the first conversion)."""

    delta_version: int | None
    delta_table_id: str | None
    location: str | None


def iceberg_delta_version(storage: Storage, *, table: str | None = None) -> tuple[int | None, str | None]:
    """The Delta version the table's Iceberg metadata was converted from, and that metadata file's location.

    ``(None, None)`` when the table has no Iceberg metadata yet. The version is the ``delta-version`` of the
    current snapshot's summary (the table property of the same name when there is no current snapshot).
    """
    state = iceberg_state(storage, table=table)
    return state.delta_version, state.location


def iceberg_state(storage: Storage, *, table: str | None = None) -> IcebergState:
    """``iceberg_delta_version`` with the Delta table id the metadata records (``delta-table-id``)."""
    table = table or storage.root
    try:
        published = publish.latest_metadata(storage)
    except StorageError as exc:
        raise type(exc)(f"table {table}: cannot read the Iceberg metadata: {exc}") from exc
    except FileNotFoundError as exc:
        # Listed, then gone before the read: a concurrent cleanup; the next poll sees the newer state.
        raise StorageError(f"table {table}: Iceberg metadata vanished while being read: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"table {table}: cannot read the Iceberg metadata: {exc}") from exc
    # pyiceberg's parser raises its own ValidationError for a file that is not JSON.
    except (ValidationError, IcebergValidationError, ValueError, DeltabergError) as exc:
        raise IcebergStartError(
            f"the Iceberg metadata cannot be parsed ({exc}); give the start version explicitly or repair "
            "the metadata with a new conversion",
            table=table,
        ) from exc
    if published is None:
        return IcebergState(None, None, None)
    metadata, location = published.metadata, published.location
    snapshot = metadata.current_snapshot()
    raw = snapshot.summary.get(DELTA_VERSION) if snapshot is not None and snapshot.summary else None
    if raw is None:
        raw = metadata.properties.get(DELTA_VERSION)
    if raw is None:
        raise IcebergStartError(
            f"the Iceberg metadata has no {DELTA_VERSION} (it was not written by a Delta conversion); give "
            "the start version explicitly",
            table=table,
            file=location,
        )
    try:
        version = int(raw)
        if version < 0:
            raise ValueError(raw)
    except ValueError:
        raise IcebergStartError(
            f"the Iceberg metadata's {DELTA_VERSION} is {raw!r}, not a version number",
            table=table,
            file=location,
        ) from None
    return IcebergState(version, metadata.properties.get(DELTA_TABLE_ID), location)


def poll_new_commits(
    storage: Storage,
    *,
    start_version: int | None = None,
    start_from: str = START_GIVEN,
    table: str | None = None,
) -> NewCommits:
    """The commits after the start point: ``start_version``, or, for ``start_from="iceberg"``, the version the
    table's Iceberg metadata was converted from (read again at each poll; None without metadata)."""
    source_file = None
    if start_from == START_ICEBERG:
        start_version, source_file = iceberg_delta_version(storage, table=table)
    return latest_version_after(
        storage, start_version, table=table, start_from=start_from, source_file=source_file
    )


def commits_after_cursor(
    storage: Storage, *, last_event_version: int | None, table: str | None = None
) -> tuple[NewCommits, IcebergState]:
    """The commits after a watcher's cursor: the later of its last event's ``to_version`` and the Iceberg
    metadata's ``delta-version`` (commits converted since the last event need no event); every version when
    there is neither. Returns the Iceberg state read on the way (its ``delta_table_id`` goes into the event)."""
    if last_event_version is not None and last_event_version < 0:
        raise ValueError(f"last event version must not be negative, got {last_event_version}")
    iceberg = iceberg_state(storage, table=table)
    start_version, start_from, source_file = last_event_version, START_LAST_EVENT, None
    if iceberg.delta_version is not None and (start_version is None or iceberg.delta_version > start_version):
        start_version, start_from, source_file = iceberg.delta_version, START_ICEBERG, iceberg.location
    commits = latest_version_after(
        storage, start_version, table=table, start_from=start_from, source_file=source_file
    )
    return commits, iceberg
