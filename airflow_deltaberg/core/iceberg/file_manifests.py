"""The manifests of one Iceberg snapshot's new files: data manifests, and position-delete files with their
delete manifests for files that carry Delta deletion vectors.

``SnapshotPlan`` holds the fixed facts of the snapshot being written and is picklable, so that Spark
executors can write the manifests of their share of the files (``write_file_manifests`` on each slice) while
the driver writes the manifest list and metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec

from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.stats import parse_stats
from airflow_deltaberg.core.iceberg.conversion_state import ManifestRecord, write_manifest_record
from airflow_deltaberg.core.iceberg.data_files import entries_for_files
from airflow_deltaberg.core.iceberg.position_deletes import write_position_deletes
from airflow_deltaberg.core.iceberg.schema import ConvertedSchema
from airflow_deltaberg.core.storage import Storage, open_storage

#: Entries per manifest. Readers plan a scan manifest by manifest; ~25k entries keep each one a few MB.
MANIFEST_ROWS = 25_000


@dataclass(frozen=True)
class SnapshotPlan:
    """The fixed facts of one Iceberg snapshot being written for a Delta version."""

    table: str
    storage_options: Mapping[str, Any] | None
    delta_version: int
    timestamp_ms: int
    delta_metadata: Mapping[str, Any]  # the Delta metaData action in force at delta_version
    converted: ConvertedSchema
    spec: PartitionSpec
    snapshot_id: int
    sequence_number: int

    @property
    def metadata(self) -> Metadata:
        return Metadata.from_action(dict(self.delta_metadata))

    def open_storage(self) -> Storage:
        return open_storage(self.table, self.storage_options)


@dataclass(frozen=True)
class FileEntries:
    """ADDED entries for a set of Delta files: data entries, and position-delete entries for their DVs."""

    data: pa.Table
    deletes: pa.Table | None


def with_parsed_stats(files: pa.Table, metadata: Metadata) -> pa.Table:
    """``files`` with ``stats_parsed``, parsed from the ``stats`` JSON when the column is not there."""
    if "stats_parsed" in files.column_names:
        return files
    return files.append_column("stats_parsed", parse_stats(files.column("stats").combine_chunks(), metadata.schema))


def file_entries(storage: Storage, plan: SnapshotPlan, files: pa.Table) -> FileEntries:
    """Entries for Delta files (columns path, partitionValues, size, stats or stats_parsed, deletionVector)."""
    metadata = plan.metadata
    files = with_parsed_stats(files, metadata)
    data = entries_for_files(files, metadata, plan.converted, plan.spec, storage, table=plan.table,
                             snapshot_id=plan.snapshot_id, sequence_number=plan.sequence_number)
    deletes = None
    if "deletionVector" in files.column_names:
        dv = files.column("deletionVector").combine_chunks()
        if dv.null_count != len(dv):
            targets = pa.table({
                "file_path": data.column("file_path"),
                "deletionVector": dv,
                "partition": data.column("partition"),
                "record_count": data.column("record_count"),
            })
            deletes = write_position_deletes(storage, targets, sequence_number=plan.sequence_number,
                                             snapshot_id=plan.snapshot_id)
            if deletes.num_rows == 0:
                deletes = None
    return FileEntries(data, deletes)


def _sorted_for_pruning(entries: pa.Table, spec: PartitionSpec) -> pa.Table:
    """Entries ordered by partition then path, so each manifest covers a narrow partition range (readers
    prune whole manifests by their partition summaries) and a narrow path range (removals rewrite few)."""
    keys = [(f"partition.{f.name}", "ascending", "at_start") for f in spec.fields]
    if keys:
        flat = entries.select(["partition"]).flatten()
        order = pc.sort_indices(
            pa.table({**{key[0]: flat.column(key[0]) for key in keys}, "file_path": entries.column("file_path")}),
            sort_keys=[*keys, ("file_path", "ascending", "at_start")],
        )
    else:
        order = pc.sort_indices(entries.column("file_path"))
    return entries.take(order)


def write_entry_manifests(storage: Storage, plan: SnapshotPlan, entries: pa.Table, *, content: str = "data",
                          rows_per_manifest: int = MANIFEST_ROWS) -> list[ManifestRecord]:
    entries = _sorted_for_pruning(entries, plan.spec)
    return [
        write_manifest_record(storage, entries.slice(offset, rows_per_manifest), plan.converted.schema, plan.spec,
                              plan.snapshot_id, plan.sequence_number, content=content)
        for offset in range(0, entries.num_rows, rows_per_manifest)
    ]


def write_file_manifests(storage: Storage, plan: SnapshotPlan, files: pa.Table, *,
                         rows_per_manifest: int = MANIFEST_ROWS) -> list[ManifestRecord]:
    """Manifests (data, then deletes) adding ``files`` in the snapshot of ``plan``."""
    entries = file_entries(storage, plan, files)
    records = write_entry_manifests(storage, plan, entries.data, rows_per_manifest=rows_per_manifest)
    if entries.deletes is not None:
        records += write_entry_manifests(storage, plan, entries.deletes, content="deletes",
                                         rows_per_manifest=rows_per_manifest)
    return records


def added_rows(records: list[ManifestRecord], content: int) -> tuple[int, int]:
    """(files, rows) added by manifests of ``content`` (0 data, 1 position deletes)."""
    chosen = [r.info for r in records if r.info.content == content]
    return sum(i.added_files_count for i in chosen), sum(i.added_rows_count for i in chosen)
