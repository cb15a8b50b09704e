"""When the files of a table's earlier Iceberg histories may be deleted.

A Delta table deleted and written again at the same path starts a new Iceberg history (``table_identity``): its
first metadata file is numbered above every file in the folder and records when and where it started
(``start_properties``), and later files of the history keep those properties. Readers may still hold a pointer
to the earlier history (a catalog lookup or version hint read before the new history was published), so its
files stay until the new history is older than the table's ``deltaberg.cleanup.attempt-age-ms`` (the threshold of
the cleanup of killed attempts, default 1 hour). From then on, a metadata file numbered below the new history's
first one is the earlier history's, and the files only such metadata files use are no longer kept for it: the
attempt cleanup (``attempt_cleanup``) deletes them with its own rule (no snapshot of the current history uses
them, and their attempt has been silent for the threshold), in the listing it already makes.

A history started by a release that did not record its start keeps its earlier histories' files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_deltaberg.core.errors import TablePropertyError
from airflow_deltaberg.core.iceberg.publish import PublishedMetadata, metadata_file_version, metadata_key
from airflow_deltaberg.core.redact import location_text
from airflow_deltaberg.core.storage import FileEntry, Storage

#: Table properties of a history's metadata files: when its first metadata file was built (ms since the epoch),
#: that file's version, and the table uuid of the history it replaced.
STARTED_AT = "deltaberg.history.started-at-ms"
FIRST_VERSION = "deltaberg.history.first-metadata-version"
REPLACED_UUID = "deltaberg.history.replaced-table-uuid"
#: What marks a history whose earlier histories' files may still be there (``REPLACED_UUID`` stays: it is history).
START_MARKERS = (FIRST_VERSION, STARTED_AT)


@dataclass(frozen=True)
class HistoryStart:
    """Where and when the current history began."""

    first_version: int
    started_at_ms: int


def start_properties(first_version: int, replaced_uuid: str | None) -> dict[str, str]:
    """The properties that make a snapshot the first of a new history, whose metadata file is ``first_version``
    (``stamped_start`` adds the time when that file is built)."""
    properties = {FIRST_VERSION: str(first_version)}
    if replaced_uuid:
        properties[REPLACED_UUID] = replaced_uuid
    return properties


def stamped_start(properties: Mapping[str, str], now_ms: int) -> dict[str, str]:
    """``STARTED_AT`` of ``now_ms`` when ``properties`` (those a snapshot sets) start a new history, else nothing:
    the time is taken as its metadata file is built, after the conversion's manifests, so that a long conversion
    does not eat into the time readers get."""
    return {STARTED_AT: str(now_ms)} if FIRST_VERSION in properties else {}


def history_start(published: PublishedMetadata, *, table: str) -> HistoryStart | None:
    """The recorded start of ``published``'s history; None when it records none (its folder's first history, or
    one started by an earlier release). TablePropertyError when a value is not a number."""
    properties = published.metadata.properties
    if STARTED_AT not in properties and FIRST_VERSION not in properties:
        return None
    return HistoryStart(_number(properties, FIRST_VERSION, table), _number(properties, STARTED_AT, table))


def _number(properties: Mapping[str, str], name: str, table: str) -> int:
    raw = properties.get(name, "")
    if not raw.isascii() or not raw.isdigit():
        raise TablePropertyError(f"{location_text(table)}: the Iceberg table property {name} is {raw[:40]!r}, not "
                                 "a non-negative integer (it records where the table's Iceberg history began)")
    return int(raw)


def earlier_histories_expired(published: PublishedMetadata, cutoff_ms: int, *, table: str) -> int | None:
    """The first metadata version of ``published``'s history when the earlier histories' files may go (the history
    began before ``cutoff_ms``: now minus the threshold); None while they stay."""
    start = history_start(published, table=table)
    if start is None or start.started_at_ms >= cutoff_ms or start.first_version > published.version:
        return None
    return start.first_version


def earlier_history_left(storage: Storage, published: PublishedMetadata, cutoff_ms: int, *, table: str) -> bool:
    """Whether the earlier histories' files may go and are still there: the newest earlier metadata file (the one
    numbered just below the history's first) exists. The cleanup deletes the metadata files before the others."""
    first_version = earlier_histories_expired(published, cutoff_ms, table=table)
    return first_version is not None and first_version > 1 and storage.exists(metadata_key(first_version - 1))


def earlier_histories_gone(storage: Storage, published: PublishedMetadata, cutoff_ms: int, *, table: str) -> bool:
    """Whether the earlier histories' files were due to go and are gone: the newest earlier metadata file, which the
    cleanup deletes after every other earlier metadata file, no longer exists. The next metadata file of the
    history then leaves out ``START_MARKERS``."""
    first_version = earlier_histories_expired(published, cutoff_ms, table=table)
    return first_version is not None and (first_version <= 1 or not storage.exists(metadata_key(first_version - 1)))


def earlier_metadata_files(listing: Iterable[FileEntry], first_version: int,
                           published: PublishedMetadata) -> set[str]:
    """Keys of the listed ``v<N>.metadata.json`` numbered below ``first_version``, except any the metadata log of
    ``published`` names."""
    named = {e.metadata_file.rsplit("/", 1)[-1] for e in published.metadata.metadata_log}
    return {entry.key for entry in listing
            if (version := metadata_file_version(entry.name)) is not None and version < first_version
            and entry.name not in named}
