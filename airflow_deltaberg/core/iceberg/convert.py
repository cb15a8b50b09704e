"""Delta -> Iceberg conversion: write Iceberg metadata for a Delta version next to the Delta log.

Order of writes (each a new file, so a crash anywhere leaves the previous Iceberg state readable):
manifests, manifest list, ``v<N>.metadata.json`` (write-if-absent), ``version-hint.text``, catalog pointer.
Running the same conversion again converges: snapshot ids and the table uuid derive from the Delta table.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.iceberg.catalog import open_catalog, point_catalog
from airflow_deltaberg.core.iceberg.data_files import data_file_entries, refuse_deletion_vectors
from airflow_deltaberg.core.iceberg.manifest import ManifestFileInfo, write_manifest, write_manifest_list
from airflow_deltaberg.core.iceberg.partition import identity_spec
from airflow_deltaberg.core.iceberg.publish import (
    METADATA_DIR,
    PublishedMetadata,
    latest_metadata,
    publish_metadata,
)
from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY, convert_schema
from airflow_deltaberg.core.iceberg.table_metadata import (
    DELTA_VERSION,
    SnapshotSpec,
    build_metadata,
    snapshot_id_for,
)
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)

MANIFEST_ROWS = 250_000


@dataclass(frozen=True)
class ConversionResult:
    """What a conversion did (the operator's XCom and the CLI's JSON)."""

    table: str
    mode: str  # "full" | "incremental" | "up-to-date"
    delta_version: int
    snapshot_id: int
    metadata_location: str
    files_added: int
    files_removed: int
    records: int
    seconds: float
    identifier: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summary(entries: pa.Table, previous_files: int, previous_records: int) -> dict[str, str]:
    records = int(pc.sum(entries.column("record_count")).as_py() or 0)
    size = int(pc.sum(entries.column("file_size_in_bytes")).as_py() or 0)
    return {
        "added-data-files": str(entries.num_rows),
        "added-records": str(records),
        "added-files-size": str(size),
        "deleted-data-files": str(previous_files),
        "deleted-records": str(previous_records),
        "total-data-files": str(entries.num_rows),
        "total-records": str(records),
        "total-files-size": str(size),
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
    }


def _output(storage: Storage, key: str) -> tuple[Any, str]:
    """A pyarrow filesystem and path for a new metadata file, its directory created where needed."""
    fs, path = storage.arrow_path(key)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    return fs, path


def _write_manifests(
    storage: Storage, entries: pa.Table, converted_schema: Any, spec: Any, snapshot_id: int
) -> list[ManifestFileInfo]:
    infos = []
    for offset in range(0, max(entries.num_rows, 1), MANIFEST_ROWS):
        chunk = entries.slice(offset, MANIFEST_ROWS)
        if chunk.num_rows == 0:
            break
        key = f"{METADATA_DIR}/{uuid.uuid4()}-m{offset // MANIFEST_ROWS}.avro"
        fs, path = _output(storage, key)
        summary = write_manifest(path, chunk, schema=converted_schema, spec=spec, snapshot_id=snapshot_id,
                                 filesystem=fs)
        infos.append(summary.manifest_file(storage.uri(key)))
    return infos


def convert_full(
    table: DeltaTable,
    snapshot: Snapshot,
    previous: PublishedMetadata | None,
) -> tuple[PublishedMetadata, int]:
    """One Iceberg snapshot listing every live file of ``snapshot``; returns the metadata and file count."""
    refuse_deletion_vectors(snapshot)
    storage = table.storage
    prev_meta = previous.metadata if previous else None
    converted = convert_schema(
        snapshot.schema,
        snapshot.column_mapping_mode,
        table=snapshot.table,
        previous=prev_meta.schema() if prev_meta else None,
        previous_last_column_id=prev_meta.last_column_id if prev_meta else 0,
    )
    spec = identity_spec(converted.schema, snapshot.partition_columns)
    delta_id = snapshot.metadata.id
    snapshot_id = snapshot_id_for(delta_id, snapshot.version)
    sequence_number = (prev_meta.last_sequence_number if prev_meta else 0) + 1
    entries = data_file_entries(snapshot, converted, spec, storage, snapshot_id=snapshot_id,
                                sequence_number=sequence_number)
    manifests = _write_manifests(storage, entries, converted.schema, spec, snapshot_id)
    list_key = f"{METADATA_DIR}/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
    fs, list_path = _output(storage, list_key)
    parent = prev_meta.current_snapshot_id if prev_meta else None
    write_manifest_list(list_path, manifests, snapshot_id, parent, sequence_number, filesystem=fs)
    previous_summary = prev_meta.snapshot_by_id(parent).summary if prev_meta and parent else None
    prev_files = int(previous_summary["total-data-files"]) if previous_summary else 0
    prev_records = int(previous_summary["total-records"]) if previous_summary else 0
    metadata = build_metadata(
        previous=prev_meta,
        previous_location=previous.location if previous else None,
        location=storage.root,
        delta_table_id=delta_id,
        schema=converted.schema,
        last_column_id=converted.last_column_id,
        spec=spec,
        properties={NAME_MAPPING_PROPERTY: converted.name_mapping_json(), "format-version": "2"},
        snapshot=SnapshotSpec(
            delta_version=snapshot.version,
            delta_timestamp_ms=snapshot.timestamp,
            operation=Operation.OVERWRITE if prev_meta else Operation.APPEND,
            manifest_list=storage.uri(list_key),
            summary=_summary(entries, prev_files, prev_records),
        ),
        now_ms=int(time.time() * 1000),
    )
    published = publish_metadata(storage, (previous.version if previous else 0) + 1, metadata)
    return published, entries.num_rows


def convert(
    location: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    catalog_config: Mapping[str, Any] | None = None,
    catalog_name: str = "deltaberg",
    identifier: str | None = None,
    version: int | None = None,
) -> ConversionResult:
    """Convert the Delta table at ``location`` (latest version unless ``version``) and register it."""
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    snapshot = table.snapshot(version)
    previous = latest_metadata(table.storage)
    if previous is not None and previous.metadata.properties.get(DELTA_VERSION) == str(snapshot.version):
        mode, published, files_added = "up-to-date", previous, 0
    else:
        mode = "full"
        published, files_added = convert_full(table, snapshot, previous)
    if identifier is not None:
        point_catalog(open_catalog(catalog_name, catalog_config), identifier, published.location)
    current = published.metadata.current_snapshot_id or 0
    records = int(published.metadata.snapshot_by_id(current).summary["total-records"]) if current else 0
    return ConversionResult(
        table=table.location,
        mode=mode,
        delta_version=snapshot.version,
        snapshot_id=current,
        metadata_location=published.location,
        files_added=files_added,
        files_removed=0,
        records=records,
        seconds=round(time.monotonic() - started, 3),
        identifier=identifier,
    )
