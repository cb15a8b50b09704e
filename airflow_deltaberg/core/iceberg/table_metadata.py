"""Iceberg table metadata (v2 or v3) for a converted Delta version: a new snapshot on top of the previous one."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import MetadataLogEntry, TableMetadataV2, TableMetadataV3
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotLogEntry, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from airflow_deltaberg.core.iceberg.table_properties import previous_versions_max

DELTA_VERSION = "delta-version"
DELTA_TIMESTAMP = "delta-timestamp"
DELTA_TABLE_ID = "delta-table-id"
DELTA_COLUMN_MAPPING_MODE = "delta-column-mapping-mode"

#: The table metadata models this converter writes and reads.
TableMetadata = TableMetadataV2 | TableMetadataV3


@dataclass(frozen=True)
class RowLineage:
    """v3 row lineage of a new snapshot: its first row id, and the table's next row id after it."""

    first_row_id: int
    next_row_id: int

    @property
    def added_rows(self) -> int:
        return self.next_row_id - self.first_row_id


def next_row_id(metadata: TableMetadata | None) -> int:
    """The table's next row id (0 for a new table, or one upgraded from v2)."""
    return getattr(metadata, "next_row_id", None) or 0


def with_log_entry(metadata_log: list[MetadataLogEntry], entry: MetadataLogEntry,
                   properties: dict[str, Any], *, table: str) -> list[MetadataLogEntry]:
    """``metadata_log`` with ``entry`` appended, keeping the newest ``write.metadata.previous-versions-max``
    (at least one), as Iceberg's own commits do."""
    return [*metadata_log, entry][-previous_versions_max(properties, table=table):]


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


def new_snapshot_id(previous: TableMetadata | None, delta_table_id: str, delta_version: int) -> int:
    """The id of the snapshot for ``delta_version``, distinct from every snapshot already published."""
    existing = {s.snapshot_id for s in previous.snapshots} if previous else set()
    salt = 0
    while (candidate := snapshot_id_for(delta_table_id, delta_version, salt)) in existing:
        salt += 1
    return candidate


def build_metadata(
    *,
    previous: TableMetadata | None,
    previous_location: str | None,
    location: str,
    delta_table_id: str,
    schema: Schema,
    last_column_id: int,
    spec: PartitionSpec,
    properties: dict[str, str],
    snapshot: SnapshotSpec,
    now_ms: int,
    reset_history: bool = False,
    format_version: int = 2,
    lineage: RowLineage | None = None,
    dropped_properties: Collection[str] = (),
) -> TableMetadata:
    """Metadata with ``snapshot`` as the new current snapshot of ``main``: the previous file's properties updated
    with ``properties``, less ``dropped_properties``.

    ``reset_history`` starts the schemas, partition specs and snapshots afresh (the metadata log, the uuid,
    and the id and sequence counters carry on): for when column ids change meaning, e.g. column mapping enabled
    on a converted table, where older schemas and specs would contradict the new one (Iceberg Java refuses a
    spec whose source id now names another column) and older snapshots would read columns by stale ids.
    """
    keep = previous if previous is not None and not reset_history else None
    schema, spec = with_table_ids(schema, spec, previous, reset_history)
    schemas = list(keep.schemas) if keep else []
    if schema.schema_id not in {s.schema_id for s in schemas}:
        schemas.append(schema)
    schema_id = schema.schema_id
    specs = list(keep.partition_specs) if keep else []
    if spec.spec_id not in {s.spec_id for s in specs}:
        specs.append(spec)
    spec_id = spec.spec_id
    parent = keep.current_snapshot_id if keep else None
    sequence_number = (previous.last_sequence_number if previous else 0) + 1
    snapshot_id = snapshot.snapshot_id
    summary = {DELTA_VERSION: str(snapshot.delta_version), DELTA_TIMESTAMP: str(snapshot.delta_timestamp_ms),
               **snapshot.summary}
    snapshot_log = time_ordered(keep.snapshot_log) if keep else []
    # Delta commit times may go backwards (file times, some in-commit timestamps) and Iceberg readers refuse a
    # snapshot log out of time order: a snapshot is never older than the one before it. Delta's own time stays in
    # the summary.
    timestamp_ms = max([snapshot.delta_timestamp_ms, *(e.timestamp_ms for e in snapshot_log[-1:])])
    new_snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=sequence_number,
        timestamp_ms=timestamp_ms,
        manifest_list=snapshot.manifest_list,
        summary=Summary(operation=snapshot.operation, **summary),
        schema_id=schema_id,
        first_row_id=lineage.first_row_id if lineage else None,
        added_rows=lineage.added_rows if lineage else None,
    )
    snapshots = [s for s in (keep.snapshots if keep else []) if s.snapshot_id != snapshot_id]
    snapshots.append(new_snapshot)
    snapshot_log.append(SnapshotLogEntry(snapshot_id=snapshot_id, timestamp_ms=timestamp_ms))
    merged_properties: dict[str, Any] = dict(previous.properties) if previous else {}
    merged_properties.update(properties)
    for name in dropped_properties:
        merged_properties.pop(name, None)
    merged_properties[DELTA_VERSION] = str(snapshot.delta_version)
    merged_properties[DELTA_TIMESTAMP] = str(snapshot.delta_timestamp_ms)
    merged_properties[DELTA_TABLE_ID] = delta_table_id
    metadata_log = list(previous.metadata_log) if previous else []
    if previous is not None and previous_location is not None:
        metadata_log = with_log_entry(metadata_log, MetadataLogEntry(metadata_file=previous_location,
                                                                     timestamp_ms=previous.last_updated_ms),
                                      merged_properties, table=location)
    last_partition_id = max([pf.field_id for s in specs for pf in s.fields]
                            + [previous.last_partition_id or 999 if previous else 999])
    model: type[TableMetadata] = TableMetadataV2
    extra: dict[str, Any] = {}
    if format_version >= 3:
        if lineage is None:
            raise ValueError("v3 metadata needs the snapshot's row lineage")
        model, extra = TableMetadataV3, {"next_row_id": lineage.next_row_id}
    return model(
        location=location,
        table_uuid=previous.table_uuid if previous else table_uuid_for(delta_table_id),
        # Not before the snapshot it adds (a Delta commit time may lie ahead of this clock), nor the previous file.
        last_updated_ms=max(now_ms, timestamp_ms, previous.last_updated_ms + 1 if previous else 0),
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
        **extra,
    )


def time_ordered(snapshot_log: list[SnapshotLogEntry]) -> list[SnapshotLogEntry]:
    """``snapshot_log`` with each time raised to the latest before it (tables converted before snapshot times were
    kept in order can carry a log that goes backwards; Iceberg Java refuses to load those)."""
    out: list[SnapshotLogEntry] = []
    for entry in snapshot_log:
        if out and entry.timestamp_ms < out[-1].timestamp_ms:
            entry = SnapshotLogEntry(snapshot_id=entry.snapshot_id, timestamp_ms=out[-1].timestamp_ms)
        out.append(entry)
    return out


def with_table_ids(schema: Schema, spec: PartitionSpec, previous: TableMetadata | None,
                   reset_history: bool = False) -> tuple[Schema, PartitionSpec]:
    """``schema`` and ``spec`` with the ids they have (or get) in the table: an equal schema or spec already in
    the table keeps its id, a new one gets the next. Manifests must name the spec id the metadata gives."""
    if previous is None:
        return (Schema(*schema.fields, schema_id=0, identifier_field_ids=schema.identifier_field_ids),
                PartitionSpec(*spec.fields, spec_id=0))
    schemas = [] if reset_history else previous.schemas
    specs = [] if reset_history else previous.partition_specs
    schema_id = next((s.schema_id for s in schemas if s.as_struct() == schema.as_struct()),
                     max((s.schema_id for s in previous.schemas), default=-1) + 1)
    spec_id = next((s.spec_id for s in specs if s.fields == spec.fields),
                   max((s.spec_id for s in previous.partition_specs), default=-1) + 1)
    return (Schema(*schema.fields, schema_id=schema_id, identifier_field_ids=schema.identifier_field_ids),
            PartitionSpec(*spec.fields, spec_id=spec_id))
