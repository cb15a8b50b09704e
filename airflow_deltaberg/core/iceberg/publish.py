"""Reading and publishing Iceberg metadata files next to the Delta log.

Layout: the Iceberg table location is ``<table>/_iceberg``, with ``metadata/v<N>.metadata.json`` and
``metadata/version-hint.text`` below it (as path-based readers expect), manifests and manifest lists beside
them. The folder name starts with ``_`` because Delta's VACUUM (Delta on Spark and delta-rs) deletes every
file under the table it does not know about, except below folders whose names start with ``_`` or ``.``:
in ``<table>/metadata`` the Iceberg table would be destroyed by the next VACUUM.

A metadata file is created with write-if-absent, so of two
converters racing for version N exactly one wins; the hint and the catalog pointer move after it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pydantic import BaseModel
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataV2, TableMetadataV3
from pyiceberg.utils.properties import property_as_bool

from airflow_deltaberg.core.errors import (
    ConcurrentConversionError,
    FileAlreadyExistsError,
    IcebergMetadataError,
)
from airflow_deltaberg.core.iceberg.schema import parse_schema_json, parse_table_metadata
from airflow_deltaberg.core.iceberg.table_metadata import TableMetadata
from airflow_deltaberg.core.iceberg.table_properties import DELETE_AFTER_COMMIT
from airflow_deltaberg.core.storage import Storage

ICEBERG_DIR = "_iceberg"
METADATA_DIR = f"{ICEBERG_DIR}/metadata"
VERSION_HINT = f"{METADATA_DIR}/version-hint.text"
# ASCII digits without a leading zero: the names this converter writes (``\d`` would take ``v٣``, and int() reads
# ``v03`` as 3: both would name a file that does not exist).
_METADATA_FILE = re.compile(r"^v([1-9][0-9]*)\.metadata\.json$")


@dataclass(frozen=True)
class PublishedMetadata:
    version: int
    key: str
    location: str
    metadata: TableMetadata


def metadata_key(version: int) -> str:
    return f"{METADATA_DIR}/v{version}.metadata.json"


def _hinted_version(storage: Storage) -> int | None:
    try:
        text = storage.read(VERSION_HINT).strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() and storage.exists(metadata_key(int(text))) else None


def metadata_versions(storage: Storage) -> list[int]:
    """Versions of the complete metadata files, newest first: from the one the hint names up, or without a usable
    hint every one the folder holds.

    Versions are published one after the other (write-if-absent of v<N+1>), so from the version the hint names,
    the newest is found by probing the next ones: a crash between writing a metadata file and moving the hint
    leaves a newer, complete file, which wins. Without a usable hint, the folder (which also holds every
    manifest) is listed.
    """
    version = _hinted_version(storage)
    if version is None:
        return sorted((v for e in storage.list_from(METADATA_DIR) if (v := metadata_file_version(e.name)) is not None),
                      reverse=True)
    versions = [version]
    while storage.exists(metadata_key(versions[-1] + 1)):
        versions.append(versions[-1] + 1)
    return versions[::-1]


def read_metadata(storage: Storage, version: int) -> PublishedMetadata:
    """Metadata file ``version``; IcebergMetadataError when it is not Iceberg format version 2 or 3."""
    key = metadata_key(version)
    metadata = parse_table_metadata(storage.read(key))
    if not isinstance(metadata, (TableMetadataV2, TableMetadataV3)):
        raise IcebergMetadataError("the Iceberg metadata file is not Iceberg format version 2 or 3 metadata",
                                   table=storage.root, file=storage.uri(key))
    return PublishedMetadata(version, key, storage.uri(key), metadata)


def read_current_schema(storage: Storage, version: int) -> Schema:
    """The current schema of metadata file ``version``, without parsing the rest of it (snapshots, logs, specs);
    IcebergMetadataError when the file is not JSON, not format version 2 or 3, or has no such schema."""
    key = metadata_key(version)
    raw = storage.read(key)

    def damaged(what: str) -> IcebergMetadataError:
        return IcebergMetadataError(f"the Iceberg metadata file {what}", table=storage.root, file=storage.uri(key))

    try:
        document = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise damaged(f"is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format-version") not in (2, 3):
        raise damaged("is not Iceberg format version 2 or 3 metadata")
    current = document.get("current-schema-id")
    found = [s for s in document.get("schemas") or () if isinstance(s, dict) and s.get("schema-id") == current]
    if len(found) != 1:
        raise damaged(f"has no schema with its current-schema-id {current!r}")
    try:
        return parse_schema_json(found[0])
    except ValueError as exc:  # pydantic's ValidationError
        raise damaged(f"has a current schema that does not parse: {exc}") from None


def latest_metadata(storage: Storage) -> PublishedMetadata | None:
    """The newest complete metadata file (``metadata_versions``), whoever wrote it: a conversion adopts only its
    own (``table_identity.adopted_history``)."""
    versions = metadata_versions(storage)
    return read_metadata(storage, versions[0]) if versions else None


def metadata_json(metadata: TableMetadata) -> bytes:
    """The metadata.json bytes of ``metadata``. pyiceberg 0.12 reads v3 metadata but refuses to write it (its
    model_dump_json raises); the fields of its v3 model are those of the spec, so pydantic's own serializer is
    used for them."""
    if isinstance(metadata, TableMetadataV3):
        return BaseModel.model_dump_json(metadata, by_alias=True, exclude_none=True).encode()
    return metadata.model_dump_json(by_alias=True, exclude_none=True).encode()


def publish_metadata(storage: Storage, version: int, metadata: TableMetadata) -> PublishedMetadata:
    """Write ``v<version>.metadata.json`` (fails if another converter wrote it first), then the hint."""
    key = metadata_key(version)
    payload = metadata_json(metadata)
    try:
        storage.write_if_absent(key, payload)
    except FileAlreadyExistsError as exc:
        raise ConcurrentConversionError(
            f"another conversion published Iceberg metadata version {version} first ({storage.uri(key)}); "
            "this run's snapshot for it was not published (snapshots this run published before it stay); run the "
            "conversion again to continue from there"
        ) from exc
    storage.replace(VERSION_HINT, str(version).encode())
    return PublishedMetadata(version, key, storage.uri(key), metadata)


def dropped_metadata_files(storage: Storage, before: PublishedMetadata | None, after: PublishedMetadata) -> list[str]:
    """Keys of this converter's metadata files (``v<N>.metadata.json``) that ``after`` no longer names, neither
    as itself nor in its metadata log, from the oldest one ``before`` named on: what a commit may delete once
    every pointer has moved to ``after``; none unless the table's ``write.metadata.delete-after-commit.enabled``
    says so. Older ones were deleted by an earlier run."""
    if not property_as_bool(after.metadata.properties, DELETE_AFTER_COMMIT, False):
        return []
    named = [after.location, *(e.metadata_file for e in after.metadata.metadata_log)]
    kept = {v for location in named if (v := _own_version(storage, location)) is not None}
    if before is None:
        oldest = 1
    else:
        earlier = [before.location, *(e.metadata_file for e in before.metadata.metadata_log)]
        oldest = min(v for location in earlier if (v := _own_version(storage, location)) is not None)
    return [metadata_key(v) for v in range(oldest, after.version) if v not in kept]


def _own_version(storage: Storage, location: str) -> int | None:
    """N of a location that is this table's ``<metadata folder>/v<N>.metadata.json``, else None."""
    key = metadata_folder_key(storage, location)
    return None if key is None else metadata_file_version(key[len(METADATA_DIR) + 1:])


def metadata_file_version(name: str) -> int | None:
    """N of a file name ``v<N>.metadata.json`` (a metadata file this converter wrote), else None."""
    match = _METADATA_FILE.match(name)
    return int(match.group(1)) if match else None


def metadata_folder_key(storage: Storage, location: str) -> str | None:
    """The storage key of a location inside the table's Iceberg metadata folder, None for anything else."""
    prefix = storage.uri(METADATA_DIR) + "/"
    return location[len(storage.root) + 1:] if location.startswith(prefix) else None


def ensure_version_hint(storage: Storage, version: int) -> None:
    """Point ``version-hint.text`` at ``version`` unless it already does."""
    try:
        current = storage.read(VERSION_HINT).strip()
    except FileNotFoundError:
        current = b""
    if current != str(version).encode():
        storage.replace(VERSION_HINT, str(version).encode())
