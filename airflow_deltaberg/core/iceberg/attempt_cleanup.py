"""Removing the files of conversion attempts that were killed before they published.

Every file an attempt writes under a fresh name holds its id (a uuid4 hex, ``SnapshotPlan.attempt``): its
manifests and their entry copies and the Spark engine's spill files (``<attempt>-...``), its manifest list and
conversion state (``snap-<id>-1-<attempt>.avro...``). A failed attempt deletes its own files
(``discarded_unless_published``); a killed process cannot. A later run deletes the files of an attempt when no
snapshot of the table uses them and the attempt's newest file is older than the table property
``deltaberg.cleanup.attempt-age-ms`` (default 1 hour; looked for once in ten snapshots written): an attempt that is
still running writes a file every few seconds to minutes (a manifest group, a spill file), so one silent for an hour
is gone. Files that a snapshot of any other metadata file in the folder uses stay (earlier metadata versions, a
newer one a concurrent run published); that check reads those files, and runs only when such candidates are left.
The metadata files of an earlier history (the table was deleted and written again at the same path) count only
until the current history is older than the same threshold (``earlier_histories``): then they are deleted too, and
so are the files only they used. Content-addressed delete files are left alone: their names hold no attempt, and
another run may use the same ones.
"""

from __future__ import annotations

import logging
import re

from airflow_deltaberg.core.errors import ConversionStateError, DeltabergError
from airflow_deltaberg.core.iceberg.conversion_state import ConversionState, read_state
from airflow_deltaberg.core.iceberg.earlier_histories import (
    earlier_histories_expired,
    earlier_history_left,
    earlier_metadata_files,
)
from airflow_deltaberg.core.iceberg.expire import files_of, used_files
from airflow_deltaberg.core.iceberg.publish import METADATA_DIR, PublishedMetadata, metadata_file_version, read_metadata
from airflow_deltaberg.core.iceberg.table_properties import ATTEMPT_AGE
from airflow_deltaberg.core.storage import FileEntry, Storage

log = logging.getLogger(__name__)

DEFAULT_ATTEMPT_AGE_MS = 3600 * 1000

_ATTEMPT_FILE = re.compile(r"^([0-9a-f]{32})-")
_MANIFEST_LIST = re.compile(r"^snap-\d+-\d+-([0-9a-f]{32})\.avro")


def attempt_of(name: str) -> str | None:
    """The attempt id a metadata-folder file name holds, None for files of no attempt."""
    match = _ATTEMPT_FILE.match(name) or _MANIFEST_LIST.match(name)
    return match.group(1) if match else None


def attempt_age_ms(published: PublishedMetadata) -> int:
    raw = published.metadata.properties.get(ATTEMPT_AGE, str(DEFAULT_ATTEMPT_AGE_MS))
    try:
        return int(raw)
    except ValueError as exc:
        raise DeltabergError(f"the Iceberg table property {ATTEMPT_AGE} is {raw!r}, not a number of ms") from exc


def abandoned_attempt_files(storage: Storage, published: PublishedMetadata, state: ConversionState | None,
                            now_ms: int, older_than_ms: int | None = None) -> list[str]:
    """Keys of the files of attempts silent for ``older_than_ms`` (the table's property by default) that no
    snapshot of ``published`` uses (``state``: its current snapshot's conversion state). Empty when a snapshot's
    state is missing (its files cannot be known)."""
    cutoff = now_ms - (attempt_age_ms(published) if older_than_ms is None else older_than_ms)
    first_version = earlier_histories_expired(published, cutoff, table=storage.root)
    metadata = published.metadata
    listed = {attempt_of(s.manifest_list.rsplit("/", 1)[-1]) for s in metadata.snapshots}
    by_attempt: dict[str, list[FileEntry]] = {}
    listing = storage.list_from(METADATA_DIR)
    for entry in listing:
        attempt = attempt_of(entry.name)
        if attempt is not None and attempt not in listed:
            by_attempt.setdefault(attempt, []).append(entry)
    candidates = {e.key for files in by_attempt.values() if max(f.mtime_ms for f in files) < cutoff for e in files}
    earlier = earlier_metadata_files(listing, first_version, published) if first_version is not None else set()
    candidates |= earlier
    current = metadata.snapshot_by_id(metadata.current_snapshot_id) if metadata.current_snapshot_id else None
    if candidates and current is not None and state is not None:
        # The current snapshot uses most files still around (manifests of attempts whose snapshots expired).
        candidates -= files_of(storage, current.manifest_list, state, set())
    if not candidates:
        return []
    used = used_files(storage, metadata, [s.snapshot_id for s in metadata.snapshots])
    if used is None:
        log.warning("%s: a snapshot has no conversion state: files of abandoned attempts stay", storage.root)
        return []
    candidates -= used
    if candidates:
        # Snapshots of the other metadata files (earlier versions, an earlier history of the table) may still be
        # read through them.
        candidates -= _used_by_other_metadata(storage, published, [e.name for e in listing], first_version or 0)
    # Metadata files first: a crash part way leaves no metadata file naming a file already deleted. The newest
    # earlier one last of them: once it is gone, so are the others (``earlier_histories_gone``).
    return sorted(candidates, key=lambda key: (key not in earlier, _version_of(key) if key in earlier else 0, key))


def _version_of(key: str) -> int:
    return metadata_file_version(key.rsplit("/", 1)[-1]) or 0


def _used_by_other_metadata(storage: Storage, published: PublishedMetadata, names: list[str],
                            first_version: int) -> set[str]:
    """Files used by the snapshots of the folder's other metadata files numbered from ``first_version`` on whose
    conversion state is still there (an expired snapshot's state goes with its own files)."""
    keys: set[str] = set()
    seen: set[str] = set()
    for name in names:
        version = metadata_file_version(name)
        if version is None or version == published.version or version < first_version:
            continue
        try:
            other = read_metadata(storage, version).metadata
        except DeltabergError as exc:
            if exc.retryable:
                raise  # unread, its files would look unused and be deleted
            continue  # not Iceberg metadata: it names no file of ours
        except (ValueError, FileNotFoundError):
            continue
        for snapshot in other.snapshots:
            try:
                state = read_state(storage, snapshot.manifest_list)
            except ConversionStateError:
                continue  # as one gone: a state that cannot be read names no file
            if state is not None:
                keys |= files_of(storage, snapshot.manifest_list, state, seen)
    return keys


#: The cleanup runs when the table's sequence number is a multiple of this (once in ten snapshots written): killed
#: attempts are rare, and the folder's listing costs a run of a table with many snapshots ~5 ms. An earlier history
#: waiting to go costs one existence check a run instead, until a metadata file records that it went.
CLEANUP_EVERY = 10


def remove_abandoned_attempts(storage: Storage, published: PublishedMetadata, state: ConversionState | None,
                              now_ms: int) -> int:
    """Delete ``abandoned_attempt_files`` once in ``CLEANUP_EVERY`` snapshots, and at every run while an earlier
    history's files wait to go (a table written again often may never reach ten snapshots); returns how many."""
    if (published.metadata.last_sequence_number % CLEANUP_EVERY
            and not earlier_history_left(storage, published, now_ms - attempt_age_ms(published), table=storage.root)):
        return 0
    keys = abandoned_attempt_files(storage, published, state, now_ms)
    for key in keys:
        storage.delete(key)
    if keys:
        log.info("%s: deleted %d files of conversion attempts that never published or of earlier Iceberg histories",
                 storage.root, len(keys))
    return len(keys)
