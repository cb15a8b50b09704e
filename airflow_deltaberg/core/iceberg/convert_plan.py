"""The plan of one Iceberg snapshot of a conversion: the Iceberg state it builds on (``IcebergBase``), the schema and
partition spec converted from the Delta metadata, the snapshot id and sequence number (``plan_snapshot``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.metadata import TableMetadata

from airflow_deltaberg.core.delta import DeltaTable, Metadata
from airflow_deltaberg.core.delta.models import Protocol
from airflow_deltaberg.core.delta.schema import MAX_COLUMN_ID
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.conversion_state import ConversionState
from airflow_deltaberg.core.iceberg.manifests.file_manifests import SnapshotPlan
from airflow_deltaberg.core.iceberg.partition import identity_spec
from airflow_deltaberg.core.iceberg.publish import PublishedMetadata
from airflow_deltaberg.core.iceberg.schema import CHANGE_TYPE_COLUMN, ConvertedSchema, convert_schema
from airflow_deltaberg.core.iceberg.schema_history import retained_schemas, table_name_mapping
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_COLUMN_MAPPING_MODE, new_snapshot_id, with_table_ids

#: Delta table property: the change data feed is written (data files may then hold ``_change_type``).
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"


@dataclass
class IcebergBase:
    """The Iceberg state a new snapshot builds on: the published metadata and its conversion state (None for a
    new table)."""

    published: PublishedMetadata | None
    state: ConversionState | None
    #: The newest metadata version in the folder, adopted or not: the next one is written above it (write-if-absent
    #: names; a new history, or a metadata file that was ignored, still holds its number).
    seen_version: int = 0

    @property
    def next_version(self) -> int:
        return max(self.published.version if self.published else 0, self.seen_version) + 1

    @property
    def total_files(self) -> int:
        return int(self._summary().get("total-data-files", 0))

    @property
    def total_records(self) -> int:
        return int(self._summary().get("total-records", 0))

    def _summary(self) -> dict[str, str]:
        if self.published is None or self.published.metadata.current_snapshot_id is None:
            return {}
        snap = self.published.metadata.snapshot_by_id(self.published.metadata.current_snapshot_id)
        return dict(snap.summary.additional_properties) if snap and snap.summary else {}


def _maps_change_type(metadata: TableMetadata | None) -> bool:
    """Whether the name mapping of ``metadata`` maps ``_change_type``: files written while the change data feed was
    on keep the column after it is turned off."""
    mapping = table_name_mapping(metadata) if metadata is not None else None
    return mapping is not None and any(CHANGE_TYPE_COLUMN in m.names for m in mapping)


def schema_and_spec(metadata: Metadata, table: str, base: IcebergBase, format_version: int = 2,
                    version: int | None = None) -> tuple[ConvertedSchema, PartitionSpec]:
    """The Iceberg schema (with its name mapping) and partition spec of ``metadata`` (of Delta ``version``) on top
    of ``base``."""
    prev = base.published.metadata if base.published else None
    reset = resets_history(base, metadata)
    converted = convert_schema(
        metadata.schema, metadata.column_mapping_mode, table=table,
        previous=prev.schema() if prev else None, previous_last_column_id=prev.last_column_id if prev else 0,
        partition_columns=metadata.partition_columns, format_version=format_version,
        earlier=retained_schemas(prev)[1:] if prev and not reset else (), version=version,
        same_mapping_mode=not reset,
        change_data_feed=metadata.bool_property(CHANGE_DATA_FEED) or _maps_change_type(prev),
    )
    return converted, identity_spec(converted.schema, metadata.partition_columns,
                                    previous=prev.partition_specs if prev else ())


def plan_snapshot(table: DeltaTable, base: IcebergBase, metadata: Metadata, protocol: Protocol | None,
                  delta_version: int, timestamp_ms: int, format_version: int = 2,
                  table_properties: Mapping[str, str] | None = None) -> SnapshotPlan:
    """The plan of the Iceberg snapshot for ``delta_version`` on top of ``base`` (``metadata`` and ``protocol``: the
    Delta metaData and protocol in force at that version; ``table_properties``: Iceberg table properties to set).
    The plan's storage options are those the table's storage was opened with, its one source.

    Raises CorruptLogError when the schema uses a column mapping id above ``delta.columnMapping.maxColumnId``: an
    id no writer assigned may not be the field id of the column in the data files, and Iceberg readers resolve
    columns by field id (Delta readers in name mode, and some in id mode, by physical name: they would disagree)."""
    above = metadata.column_id_above_max()
    if above is not None:
        raise CorruptLogError(f"the schema uses column mapping id {above[0]}, above {MAX_COLUMN_ID} {above[1]}: "
                              "ids no writer assigned may not be the field ids of the data files",
                              table=table.location, version=delta_version)
    converted, spec = schema_and_spec(metadata, table.location, base, format_version, delta_version)
    prev = base.published.metadata if base.published else None
    schema, spec = with_table_ids(converted.schema, spec, prev, resets_history(base, metadata))
    converted = replace(converted, schema=schema)
    return SnapshotPlan(
        table=table.location,
        storage_options=dict(table.storage.storage_options) or None,
        delta_version=delta_version,
        timestamp_ms=timestamp_ms,
        metadata=metadata,
        converted=converted,
        spec=spec,
        snapshot_id=new_snapshot_id(prev, metadata.id, delta_version),
        sequence_number=(prev.last_sequence_number if prev else 0) + 1,
        format_version=format_version,
        protocol=protocol,
        table_properties=dict(table_properties or {}),
    )


def converted_mapping_mode(base: IcebergBase) -> str | None:
    """The Delta column mapping mode of the converted version the base holds."""
    if base.published is None:
        return None
    mode = base.published.metadata.properties.get(DELTA_COLUMN_MAPPING_MODE)
    if mode is None and base.state is not None:
        mode = base.state.delta_metadata.column_mapping_mode
    return mode


def resets_history(base: IcebergBase, metadata: Metadata) -> bool:
    previous_mode = converted_mapping_mode(base)
    return previous_mode is not None and previous_mode != metadata.column_mapping_mode
