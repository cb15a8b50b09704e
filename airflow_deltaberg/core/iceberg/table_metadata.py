"""Iceberg table metadata (v2) for a converted Delta version: a new snapshot on top of the previous one."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import MetadataLogEntry, TableMetadataV2
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotLogEntry, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

DELTA_VERSION = "delta-version"
DELTA_TIMESTAMP = "delta-timestamp"
DELTA_TABLE_ID = "delta-table-id"
CONVERTER = "converted-by"


def table_uuid_for(delta_table_id: str) -> str:
    """A stable Iceberg table uuid for a Delta table id, so that re-running a conversion converges."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"delta-table:{delta_table_id}"))


def snapshot_id_for(delta_table_id: str, delta_version: int, salt: int = 0) -> int:
    """A stable, positive 63-bit snapshot id per Delta version (same input, same id: idempotent runs).

    ``salt`` separates a deliberate re-conversion of an already converted version from the first one.
    """
    seed = f"delta-version:{delta_table_id}:{delta_version}" + (f":{salt}" if salt else "")
    return (uuid.uuid5(uuid.NAMESPACE_URL, seed).int >> 65) or 1


@dataclass(frozen=True)
class SnapshotSpec:
    """What one Delta commit becomes as an Iceberg snapshot."""

    snapshot_id: int
    delta_version: int
    delta_timestamp_ms: int
    operation: Operation
    manifest_list: str
    summary: dict[str, str]


def new_snapshot_id(previous: TableMetadataV2 | None, delta_table_id: str, delta_version: int) -> int:
    """The id of the snapshot for ``delta_version``, distinct from every snapshot already published."""
    existing = {s.snapshot_id for s in previous.snapshots} if previous else set()
    salt = 0
    while (candidate := snapshot_id_for(delta_table_id, delta_version, salt)) in existing:
        salt += 1
    return candidate


def build_metadata(
    *,
    previous: TableMetadataV2 | None,
    previous_location: str | None,
    location: str,
    delta_table_id: str,
    schema: Schema,
    last_column_id: int,
    spec: PartitionSpec,
    properties: dict[str, str],
    snapshot: SnapshotSpec,
    now_ms: int,
) -> TableMetadataV2:
    """Metadata with ``snapshot`` as the new current snapshot of ``main``."""
    schemas = list(previous.schemas) if previous else []
    schema_id = _find_or_add_schema(schemas, schema)
    specs = list(previous.partition_specs) if previous else []
    spec_id = _find_or_add_spec(specs, spec)
    parent = previous.current_snapshot_id if previous else None
    sequence_number = (previous.last_sequence_number if previous else 0) + 1
    snapshot_id = snapshot.snapshot_id
    summary = {DELTA_VERSION: str(snapshot.delta_version), DELTA_TIMESTAMP: str(snapshot.delta_timestamp_ms),
               **snapshot.summary}
    new_snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=sequence_number,
        timestamp_ms=snapshot.delta_timestamp_ms,
        manifest_list=snapshot.manifest_list,
        summary=Summary(operation=snapshot.operation, **summary),
        schema_id=schema_id,
    )
    snapshots = [s for s in (previous.snapshots if previous else []) if s.snapshot_id != snapshot_id]
    snapshots.append(new_snapshot)
    snapshot_log = list(previous.snapshot_log) if previous else []
    snapshot_log.append(SnapshotLogEntry(snapshot_id=snapshot_id, timestamp_ms=snapshot.delta_timestamp_ms))
    metadata_log = list(previous.metadata_log) if previous else []
    if previous is not None and previous_location is not None:
        metadata_log.append(MetadataLogEntry(metadata_file=previous_location, timestamp_ms=previous.last_updated_ms))
    merged_properties: dict[str, Any] = dict(previous.properties) if previous else {}
    merged_properties.update(properties)
    merged_properties[DELTA_VERSION] = str(snapshot.delta_version)
    merged_properties[DELTA_TIMESTAMP] = str(snapshot.delta_timestamp_ms)
    merged_properties[DELTA_TABLE_ID] = delta_table_id
    last_partition_id = max([pf.field_id for s in specs for pf in s.fields], default=999)
    return TableMetadataV2(
        location=location,
        table_uuid=previous.table_uuid if previous else table_uuid_for(delta_table_id),
        last_updated_ms=max(now_ms, previous.last_updated_ms + 1 if previous else 0),
        last_column_id=max(last_column_id, previous.last_column_id if previous else 0),
        schemas=schemas,
        current_schema_id=schema_id,
        partition_specs=specs,
        default_spec_id=spec_id,
        last_partition_id=last_partition_id,
        properties=merged_properties,
        current_snapshot_id=snapshot_id,
        snapshots=snapshots,
        snapshot_log=snapshot_log,
        metadata_log=metadata_log,
        sort_orders=[UNSORTED_SORT_ORDER],
        default_sort_order_id=UNSORTED_SORT_ORDER.order_id,
        refs={MAIN_BRANCH: SnapshotRef(snapshot_id=snapshot_id, snapshot_ref_type=SnapshotRefType.BRANCH)},
        last_sequence_number=sequence_number,
    )


def _find_or_add_schema(schemas: list[Schema], schema: Schema) -> int:
    for existing in schemas:
        if existing.as_struct() == schema.as_struct():
            return existing.schema_id
    schema_id = max((s.schema_id for s in schemas), default=-1) + 1
    schemas.append(Schema(*schema.fields, schema_id=schema_id, identifier_field_ids=schema.identifier_field_ids))
    return schema_id


def _find_or_add_spec(specs: list[PartitionSpec], spec: PartitionSpec) -> int:
    for existing in specs:
        if existing.fields == spec.fields:
            return existing.spec_id
    spec_id = max((s.spec_id for s in specs), default=-1) + 1
    specs.append(PartitionSpec(*spec.fields, spec_id=spec_id))
    return spec_id
