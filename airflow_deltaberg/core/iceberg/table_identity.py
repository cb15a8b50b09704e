"""Which Iceberg history a conversion builds on: only metadata this converter wrote for this Delta table's log.

Every metadata file records the Delta table id it was converted from (``delta-table-id``; the table uuid derives
from it) and a fingerprint of the Delta version it converted (``delta-commit-fingerprint``: the sha256 of that
commit file's bytes, one small read per run; for a version without a commit file, of its checkpoint's names and
sizes). A ``v<N>.metadata.json`` is adopted only when it is this converter's (v2/v3 metadata at this table's
``_iceberg``, its uuid derived from its table id, its current manifest list in the metadata folder), its Delta
version is in the log, and its fingerprint matches the log's. Any other file is ignored with a warning: a forged or
foreign file, or the history of a Delta table that was deleted and written again at the same path. Nothing adopted
means a new history: a full conversion that carries none of the old snapshots, under the new table's uuid,
numbered above every file in the folder.

A history whose commit (or checkpoint) is gone, e.g. by log cleanup, cannot be checked: it is adopted, and the run
is a full conversion (``History.unverified``). The new history references none of the old history's files, and
records when it started: the old files stay until it is older than a threshold (a reader may hold a pointer to
them), then a later run deletes them (``earlier_histories``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.exceptions import ValidationError

from airflow_deltaberg.core.delta.log.log_segment import commit_key, list_log
from airflow_deltaberg.core.errors import DeltabergError, StorageError
from airflow_deltaberg.core.iceberg.convert_plan import IcebergBase
from airflow_deltaberg.core.iceberg.earlier_histories import start_properties
from airflow_deltaberg.core.iceberg.publish import (
    ICEBERG_DIR,
    PublishedMetadata,
    metadata_folder_key,
    metadata_key,
    metadata_versions,
    read_metadata,
)
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TABLE_ID, DELTA_VERSION, table_uuid_for
from airflow_deltaberg.core.storage import Storage

#: Table property: ``<delta version>:sha256:<hex>`` of the converted commit file (of its checkpoint's names and sizes,
#: ``<delta version>:checkpoint-sha256:<hex>``, for a version without one; ``<delta version>:-`` with neither).
FINGERPRINT = "delta-commit-fingerprint"
_COMMIT_KIND = "sha256"
_CHECKPOINT_KIND = "checkpoint-sha256"
#: Metadata files read at most per run, newest first (a folder of forged files costs no more).
MAX_CANDIDATES = 10


@dataclass(frozen=True)
class History:
    """The Iceberg history a run builds on."""

    published: PublishedMetadata | None  # the adopted metadata; None: a new history
    newest_version: int  # the newest metadata version in the folder (0: none): the next one goes above it
    warnings: tuple[str, ...] = ()
    ignored: frozenset[str] = frozenset()  # keys of the metadata files ignored
    replaced_table_id: str | None = None  # the Delta table id of the newest ignored file, when nothing was adopted
    unverified: str | None = None  # why the adopted history cannot be checked against the log

    @property
    def fall_back(self) -> str | None:
        """Why this run must be a full conversion, None when an incremental one may go on."""
        if self.published is None and self.ignored:
            return ("the Iceberg metadata in the folder is not of this Delta table's history (see the warnings): a "
                    "new Iceberg history starts")
        return self.unverified


def commit_fingerprint(storage: Storage, version: int) -> str:
    """The fingerprint of Delta ``version`` (``FINGERPRINT``): of its commit file, or of its checkpoint when the
    version has no commit file, ``<version>:-`` when it has neither."""
    return _of_commit(storage, version) or _of_checkpoint(storage, version) or f"{version}:-"


def _of_commit(storage: Storage, version: int) -> str | None:
    try:
        data = storage.read(commit_key(version))
    except FileNotFoundError:
        return None
    return f"{version}:{_COMMIT_KIND}:{hashlib.sha256(data).hexdigest()}"


def _of_checkpoint(storage: Storage, version: int) -> str | None:
    """The names and sizes of the version's checkpoint files (one listing): a checkpoint holds the whole table,
    too much to read at every run, and its size changes with what it holds."""
    checkpoints = [c for c in list_log(storage, version).checkpoints if c.version == version]
    if not checkpoints:
        return None
    text = ";".join(f"{entry.name}:{entry.size}" for c in checkpoints for entry in c.files)
    return f"{version}:{_CHECKPOINT_KIND}:{hashlib.sha256(text.encode()).hexdigest()}"


def _in_log(storage: Storage, recorded: str) -> str | None:
    """The fingerprint the log gives now for what ``recorded`` fingerprinted, None when that file is gone."""
    version, kind, _ = (recorded.split(":", 2) + ["", ""])[:3]
    if kind == _COMMIT_KIND:
        return _of_commit(storage, int(version))
    if kind == _CHECKPOINT_KIND:
        return _of_checkpoint(storage, int(version))
    return None


def adopted_history(storage: Storage, target: int | None, latest_delta_version: Callable[[], int]) -> History:
    """The newest metadata file this converter wrote for the log at ``storage``; the newer ones are ignored.
    ``target``: the version converted to (None: the latest). ``latest_delta_version``: the log's latest version,
    asked only when a file records one beyond ``target`` whose commit is not in the log."""
    latest_delta_version = functools.cache(latest_delta_version)
    versions = metadata_versions(storage)
    warnings: list[str] = []
    ignored: set[str] = set()
    replaced_id: str | None = None
    for version in versions[:MAX_CANDIDATES]:
        try:
            published = read_metadata(storage, version)
        except FileNotFoundError:
            continue  # deleted since it was listed
        except StorageError:
            raise
        except (ValueError, ValidationError, DeltabergError) as exc:  # JSON and pydantic errors are ValueErrors
            ignored.add(metadata_key(version))
            warnings.append(f"{storage.uri(metadata_key(version))} is ignored: it is not Iceberg v2 or v3 table "
                            f"metadata ({type(exc).__name__})")
            continue
        in_log = functools.cache(functools.partial(_in_log, storage))  # the commit is read once
        reason = _foreign(storage, published, target, latest_delta_version, in_log)
        if reason is None:
            return History(published, versions[0], tuple(warnings), frozenset(ignored),
                           unverified=_unverified(published, in_log))
        ignored.add(published.key)
        warnings.append(f"{published.location} is ignored: {reason}")
        replaced_id = replaced_id or published.metadata.properties.get(DELTA_TABLE_ID)
    return History(None, versions[0] if versions else 0, tuple(warnings), frozenset(ignored), replaced_id)


def _foreign(storage: Storage, published: PublishedMetadata, target: int | None,
             latest_delta_version: Callable[[], int],
             in_log: Callable[[str], str | None]) -> str | None:
    """Why ``published`` is not this converter's metadata of this log, None when it is."""
    metadata = published.metadata
    properties = metadata.properties
    if metadata.location.rstrip("/") != storage.uri(ICEBERG_DIR):
        return f"its location is {metadata.location}, not this table's {storage.uri(ICEBERG_DIR)}"
    table_id = properties.get(DELTA_TABLE_ID)
    if not table_id:
        return f"it records no {DELTA_TABLE_ID} (this converter did not write it)"
    if str(metadata.table_uuid) != table_uuid_for(table_id):
        return (f"its table-uuid {metadata.table_uuid} is not the one derived from its {DELTA_TABLE_ID} {table_id} "
                "(this converter did not write it)")
    snapshot = metadata.current_snapshot()
    if snapshot is None or metadata_folder_key(storage, snapshot.manifest_list) is None:
        return "its current snapshot's manifest list is not in this table's Iceberg metadata folder"
    raw = properties.get(DELTA_VERSION, "")
    summary_version = snapshot.summary.get(DELTA_VERSION) if snapshot.summary else None
    if not raw.isascii() or not raw.isdigit() or summary_version != raw:
        return f"its {DELTA_VERSION} {raw!r} is not its current snapshot's ({summary_version!r})"
    version = int(raw)
    fingerprint = properties.get(FINGERPRINT)
    if fingerprint is not None and not fingerprint.startswith(f"{version}:"):
        return f"its {FINGERPRINT} is not of Delta version {version}"
    # A version whose commit is in the log is not beyond the latest: the log is not listed for it.
    actual = in_log(fingerprint) if fingerprint is not None else None
    if (actual is None and (target is None or version > target)
            and version > (latest := latest_delta_version())):
        return (f"it records Delta table {table_id} at version {version}, beyond the Delta log's latest version "
                f"{latest} (the Delta table was deleted and written again, or the file is forged)")
    if actual is not None and actual != fingerprint:
        return (f"it records Delta table {table_id} at version {version}, whose commit in the Delta log is another "
                "one (the Delta table was deleted and written again, or the file is forged)")
    return None


def _unverified(published: PublishedMetadata, in_log: Callable[[str], str | None]) -> str | None:
    """Why the history of an adopted file cannot be checked against the log, None when it was."""
    version = published.metadata.properties[DELTA_VERSION]
    fingerprint = published.metadata.properties.get(FINGERPRINT)
    if fingerprint is None:
        return (f"the Iceberg metadata records no fingerprint of the Delta commit it converted (version {version}; "
                "written by an earlier release): it cannot be checked against the log")
    if in_log(fingerprint) is None:
        return (f"the commit of Delta version {version}, the converted one, is gone (log cleanup): the converted "
                "history cannot be checked against the log")
    return None


def history_for(base: IcebergBase, delta_table_id: str,
                history: History) -> tuple[IcebergBase, str | None, dict[str, str]]:
    """The base a full conversion of Delta table ``delta_table_id`` builds on, a warning when that is a new history,
    and the properties that record the new history's start (``earlier_histories``; empty for the same history):
    ``base`` itself when it holds the same table, else none of its snapshots (numbered on above it)."""
    if base.published is None:
        if history.replaced_table_id is None:
            return base, None, {}
        old = history.replaced_table_id
        replaced_uuid = table_uuid_for(old)
    else:
        old = base.published.metadata.properties.get(DELTA_TABLE_ID)
        if old == delta_table_id:
            return base, None, {}
        replaced_uuid = str(base.published.metadata.table_uuid)
        base = IcebergBase(None, None, seen_version=max(base.published.version, base.seen_version))
    what = "the same Delta table id with another history" if old == delta_table_id else f"Delta table {old}"
    return base, (f"the Iceberg metadata was converted from {what}; the Delta table is now {delta_table_id}: a new "
                 f"Iceberg history starts (table uuid {table_uuid_for(delta_table_id)}), without the earlier "
                 "snapshots"), start_properties(base.next_version, replaced_uuid)
