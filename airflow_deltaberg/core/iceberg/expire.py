"""Expiring old Iceberg snapshots of a converted table, and deleting the metadata files only they used.

Only files of the Iceberg metadata folder are ever deleted (manifest lists, manifests, their conversion
state, position-delete files the conversion wrote); Delta's data files are never touched, whatever a
manifest says. Files are deleted only when an expired snapshot used them and no retained snapshot does
(as Iceberg's own ExpireSnapshots does), so a conversion running at the same time loses nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.compute as pc
from pyiceberg.table.metadata import MetadataLogEntry
from pyiceberg.table.snapshots import Snapshot

from airflow_deltaberg.core.errors import ConversionStateError, DeltabergError
from airflow_deltaberg.core.iceberg.conversion_state import (
    ConversionState,
    read_entries,
    read_state,
    state_key,
)
from airflow_deltaberg.core.iceberg.publish import (
    METADATA_DIR,
    PublishedMetadata,
    metadata_folder_key,
    publish_metadata,
)
from airflow_deltaberg.core.iceberg.table_metadata import TableMetadata, with_log_entry
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Expiry:
    """Snapshots expired by a published metadata file, and the files to delete once every pointer (version hint,
    catalog) has moved past the metadata that still used them."""

    snapshots_expired: int
    published: PublishedMetadata | None  # the new metadata, None when nothing expired
    files_to_delete: tuple[str, ...] = ()


def _main_ancestry(metadata: TableMetadata) -> list[int]:
    """Snapshot ids from the current one back through its parents, newest first."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}  # snapshot_by_id scans the list: once per step
    out: list[int] = []
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None and (snap := by_id.get(snapshot_id)) is not None:
        out.append(snapshot_id)
        snapshot_id = snap.parent_snapshot_id
    return out


def snapshots_to_expire(metadata: TableMetadata, *, older_than_ms: int | None, retain_last: int) -> set[int]:
    """Snapshots older than ``older_than_ms`` (all but the retained ones when None), keeping the ``retain_last``
    newest of the current ancestry (at least the current one) and every snapshot a ref points to."""
    keep = set(_main_ancestry(metadata)[: max(retain_last, 1)])
    keep.update(ref.snapshot_id for ref in metadata.refs.values())
    return {s.snapshot_id for s in metadata.snapshots
            if s.snapshot_id not in keep and (older_than_ms is None or s.timestamp_ms < older_than_ms)}


def files_of(storage: Storage, manifest_list: str, state: ConversionState, seen: set[str]) -> set[str]:
    """Keys of every metadata-folder file a snapshot uses (manifests in ``seen`` were counted already)."""
    list_key = metadata_folder_key(storage, manifest_list)
    keys = set()
    if list_key:
        keys = {list_key, state_key(list_key)}
    for record in state.manifests:
        if record.entries_key in seen:
            continue
        seen.add(record.entries_key)
        manifest_key = metadata_folder_key(storage, record.info.manifest_path)
        if manifest_key:
            keys.update((manifest_key, record.entries_key))
        if record.info.content == 1:
            entries = read_entries(storage, record, data_files=False)
            live = entries.filter(pc.not_equal(entries.column("status"), 2))
            keys.update(k for path in live.column("file_path").to_pylist() if (k := metadata_folder_key(storage, path)))
    return keys


def used_files(storage: Storage, metadata: TableMetadata, snapshot_ids: Iterable[int]) -> set[str] | None:
    """Files the snapshots use; None if a snapshot's conversion state is missing or unreadable (then its files are
    unknown)."""
    keys: set[str] = set()
    seen: set[str] = set()  # snapshots share most manifests: each one's entries are read once
    for snapshot_id in snapshot_ids:
        snap = metadata.snapshot_by_id(snapshot_id)
        try:
            state = read_state(storage, snap.manifest_list) if snap else None
        except ConversionStateError:
            return None
        if snap is None or state is None:
            return None
        keys |= files_of(storage, snap.manifest_list, state, seen)
    return keys


def users_to_check(metadata: TableMetadata, expired: set[int]) -> list[int]:
    """The retained snapshots whose files decide which files of the ``expired`` ones stay.

    Every snapshot is written on top of the one before it: it keeps some of its manifests and adds new ones, and a
    manifest it drops never comes back. So the snapshots that use a manifest follow each other, and a manifest of
    an expired snapshot that a retained one uses is used by the nearest retained snapshot before or after it: only
    those are read (a run that trims the oldest snapshots reads one state, not every retained one). Delete files are
    named from their content, so a later snapshot may use one again: while a retained snapshot has delete files,
    every retained snapshot is read."""
    ordered = sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    retained = [s for s in ordered if s.snapshot_id not in expired]
    if any(_delete_files(s) for s in retained):
        return [s.snapshot_id for s in retained]
    out: set[int] = set()
    last_retained: int | None = None
    pending = False  # an expired snapshot since the last retained one
    for snapshot in ordered:
        if snapshot.snapshot_id in expired:
            if last_retained is not None:
                out.add(last_retained)
            pending = True
        else:
            if pending:
                out.add(snapshot.snapshot_id)
            last_retained, pending = snapshot.snapshot_id, False
    return sorted(out)


def _delete_files(snapshot: Snapshot) -> bool:
    """Whether a snapshot uses delete files (unknown counts as yes)."""
    value = snapshot.summary.additional_properties.get("total-delete-files") if snapshot.summary else None
    return value != "0"


def expire_snapshots(storage: Storage, published: PublishedMetadata, *, older_than_ms: int | None = None,
                     retain_last: int = 1) -> Expiry:
    """Publish metadata without the expired snapshots; say which files only they used."""
    expired = snapshots_to_expire(published.metadata, older_than_ms=older_than_ms, retain_last=retain_last)
    return expire_snapshot_ids(storage, published, expired)


def expire_snapshot_ids(storage: Storage, published: PublishedMetadata, expired: set[int], *,
                        version: int | None = None) -> Expiry:
    """Publish metadata without the snapshots ``expired`` (never the current one) as ``version`` (by default the
    one after ``published``); say which files only they used."""
    metadata = published.metadata
    expired = expired - {metadata.current_snapshot_id} - {ref.snapshot_id for ref in metadata.refs.values()}
    if not expired:
        return Expiry(0, None)
    retained = users_to_check(metadata, expired)
    used_by_expired = used_files(storage, metadata, expired)
    used_by_retained = used_files(storage, metadata, retained)
    entry = MetadataLogEntry(metadata_file=published.location, timestamp_ms=metadata.last_updated_ms)
    new_metadata = metadata.model_copy(update={
        "snapshots": [s for s in metadata.snapshots if s.snapshot_id not in expired],
        "snapshot_log": [e for e in metadata.snapshot_log if e.snapshot_id not in expired],
        "last_updated_ms": max(int(time.time() * 1000), metadata.last_updated_ms + 1),
        "metadata_log": with_log_entry(list(metadata.metadata_log), entry, metadata.properties,
                                       table=storage.root),
    })
    # A copy of valid metadata with fewer snapshots: validating every kept snapshot again would find nothing new.
    new = publish_metadata(storage, version or published.version + 1, new_metadata)
    if used_by_expired is None or used_by_retained is None:
        log.warning("%s: %d snapshots expired, but a snapshot has no conversion state: no file will be deleted",
                    storage.root, len(expired))
        return Expiry(len(expired), new)
    return Expiry(len(expired), new, tuple(sorted(used_by_expired - used_by_retained)))


def delete_expired_files(storage: Storage, expiry: Expiry) -> int:
    """Delete what ``expire_snapshots`` found unused; returns how many files."""
    for key in expiry.files_to_delete:
        if not key.startswith(METADATA_DIR + "/"):
            raise DeltabergError(f"refusing to delete {storage.uri(key)}: outside the Iceberg metadata folder")
    storage.delete_many(expiry.files_to_delete)
    if expiry.snapshots_expired:
        log.info("%s: expired %d snapshots, deleted %d metadata files", storage.root, expiry.snapshots_expired,
                 len(expiry.files_to_delete))
    return len(expiry.files_to_delete)
