"""The Iceberg table properties the converter follows, read from the metadata a new snapshot builds on, and the
defaults it uses (and writes, for the metadata-file ones) where the table sets none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_deltaberg.core.errors import TablePropertyError
from airflow_deltaberg.core.redact import location_text

#: How many metadata files of earlier versions the metadata log names, and whether a commit deletes those that
#: fall out of it (this converter's commits and the catalogs' alike).
PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
#: Iceberg's default is 100. Each metadata file names every retained snapshot, and a table converted commit by
#: commit has one snapshot per commit: 100 copies of it made the kept metadata files 64% of `_iceberg` (74.7 of
#: 116.8 MB in one life). 10 still let a reader that loaded a pointer (catalog, version hint) a few conversions ago
#: find its file, and keep the copies at 11 files of the current one's size.
DEFAULT_PREVIOUS_VERSIONS = 10
#: Deleting what falls out of the metadata log is what keeps their number bounded.
DEFAULT_DELETE_AFTER_COMMIT = True


def int_property(properties: Mapping[str, Any], name: str, default: int, *, minimum: int, table: str) -> int:
    """An integer table property (``default`` when unset), at least ``minimum``; TablePropertyError otherwise."""
    value = properties.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise TablePropertyError(f"{location_text(table)}: the Iceberg table property {name} is "
                                 f"{str(value)[:40]!r}, not an integer of at least {minimum}")
    return number


def bool_property(properties: Mapping[str, Any], name: str, default: bool, *, table: str) -> bool:
    """A boolean table property (``default`` when unset): true or false in any case, as Iceberg reads them."""
    value = properties.get(name)
    if value is None or value == "":
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise TablePropertyError(f"{location_text(table)}: the Iceberg table property {name} is "
                                 f"{str(value)[:40]!r}, not true or false")
    return text == "true"


def previous_versions_max(properties: Mapping[str, Any], *, table: str) -> int:
    """How many earlier metadata files the log names (0 reads as 1, as in Iceberg: the previous one is named)."""
    return max(1, int_property(properties, PREVIOUS_VERSIONS_MAX, DEFAULT_PREVIOUS_VERSIONS, minimum=0, table=table))




#: Manifest merging (``manifest_merge``): read here so that every property a run may set is checked in one place.
MERGE_ENABLED = "commit.manifest-merge.enabled"
MIN_COUNT_TO_MERGE = "commit.manifest.min-count-to-merge"
TARGET_SIZE_BYTES = "commit.manifest.target-size-bytes"
#: Snapshot retention (``history``) and the cleanup of killed attempts' files (``attempt_cleanup``).
MAX_SNAPSHOTS = "deltaberg.history.max-snapshots"
ATTEMPT_AGE = "deltaberg.cleanup.attempt-age-ms"
#: The properties a conversion may be asked to set: the least value of an integer one, None for a boolean one.
SETTABLE: dict[str, int | None] = {
    PREVIOUS_VERSIONS_MAX: 0,
    DELETE_AFTER_COMMIT: None,
    MERGE_ENABLED: None,
    MIN_COUNT_TO_MERGE: 0,
    TARGET_SIZE_BYTES: 1,
    MAX_SNAPSHOTS: 1,
    ATTEMPT_AGE: 0,
}


def check_table_properties(properties: Mapping[str, Any], *, table: str) -> None:
    """Refuse (TablePropertyError) a property the converter does not follow, or a value it cannot use: the
    converter owns the table's metadata, and the others (format, name mapping, ...) are its to write."""
    unknown = sorted(str(k)[:60] for k in properties if k not in SETTABLE)
    if unknown:
        raise TablePropertyError(f"{location_text(table)}: the conversion sets only the Iceberg table properties "
                                 f"{', '.join(sorted(SETTABLE))}; not {', '.join(unknown)}")
    for name, value in properties.items():
        if not isinstance(value, str):
            raise TablePropertyError(f"{location_text(table)}: the Iceberg table property {name} must be given as "
                                     "text")
        minimum = SETTABLE[name]
        if minimum is None:
            bool_property(properties, name, False, table=table)
        else:
            int_property(properties, name, 0, minimum=minimum, table=table)
