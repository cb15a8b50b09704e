"""The manifests of one Iceberg snapshot's new files: data manifests, and position-delete files with their
delete manifests for files that carry Delta deletion vectors.

``SnapshotPlan`` holds the fixed facts of the snapshot being written and is picklable, so that Spark
executors can write the manifests of their share of the files (``write_file_manifests`` on each slice) while
the driver writes the manifest list and metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec

from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.stats import parse_stats
from airflow_deltaberg.core.errors import StatsParseError
from airflow_deltaberg.core.iceberg.conversion_state import ManifestRecord, write_manifest_record
from airflow_deltaberg.core.iceberg.data_files import entries_for_files
from airflow_deltaberg.core.iceberg.deletion_vector_files import write_deletion_vectors
from airflow_deltaberg.core.iceberg.position_deletes import write_position_deletes
from airflow_deltaberg.core.iceberg.schema import ConvertedSchema
from airflow_deltaberg.core.storage import Storage, open_storage

#: Entries per manifest. Readers plan a scan manifest by manifest; ~25k entries keep each one a few MB.
MANIFEST_ROWS = 25_000
MANIFEST_WRITERS = 2

T = TypeVar("T")
R = TypeVar("R")


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
    format_version: int = 2  # Iceberg table format: 3 writes deletion vectors in Puffin files
    # Every file this attempt at the snapshot writes under a fresh name holds this id, so that a failed attempt's
    # files can be found and deleted (two runs racing for the same snapshot have different ids).
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)

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
    """``files`` with ``stats_parsed``, parsed from the ``stats`` JSON when the column is not there (stats that
    are not JSON raise StatsParseError naming the add's path)."""
    if "stats_parsed" in files.column_names:
        return files
    try:
        parsed = parse_stats(files.column("stats").combine_chunks(), metadata.schema)
    except StatsParseError as exc:
        raise exc.of(files.column("path")[exc.row].as_py()) from exc
    return files.append_column("stats_parsed", parsed)


def file_entries(storage: Storage, plan: SnapshotPlan, files: pa.Table) -> FileEntries:
    """Entries for Delta files (columns path, partitionValues, size, stats or stats_parsed, deletionVector), in
    partition and path order."""
    files = _entry_inputs(files)
    return _entries_in_order(storage, plan, files.take(pruning_order(files, plan)))


def _entries_in_order(storage: Storage, plan: SnapshotPlan, files: pa.Table) -> FileEntries:
    """Entries for ``files`` in their order."""
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
            write_deletes = write_deletion_vectors if plan.format_version >= 3 else write_position_deletes
            deletes = write_deletes(storage, targets, sequence_number=plan.sequence_number,
                                    snapshot_id=plan.snapshot_id)
            if deletes.num_rows == 0:
                deletes = None
    return FileEntries(data, deletes)


# version (of the add, when the caller has it) only names an add in errors.
_ENTRY_INPUTS = ("path", "partitionValues", "size", "stats", "stats_parsed", "deletionVector", "version")


def _entry_inputs(files: pa.Table) -> pa.Table:
    # The JSON stats are only needed where no parsed ones are there.
    wanted = [c for c in _ENTRY_INPUTS if c in files.column_names]
    if "stats_parsed" in wanted and "stats" in wanted:
        wanted.remove("stats")
    return files.select(wanted)


def pruning_order(files: pa.Table, plan: SnapshotPlan) -> pa.Array:
    """Row order of ``files`` (its columns path and partitionValues suffice) by partition values then path, so
    each manifest covers a narrow partition range (readers prune whole manifests by their partition summaries)
    and a narrow path range (removals rewrite few). Partition values sort as their Delta strings, which groups
    equal values, all a manifest's summary needs."""
    metadata, spec = plan.metadata, plan.spec
    physical = {f.name: f.physical_name for f in metadata.schema.fields} \
        if metadata.column_mapping_mode in ("name", "id") else {}
    keys: dict[str, pa.Array] = {}
    if spec.fields and files.num_rows:
        values = files.column("partitionValues").combine_chunks()
        for i, pf in enumerate(spec.fields):
            keys[f"k{i}"] = pc.map_lookup(values, physical.get(pf.name, pf.name), "first")
    keys["path"] = files.column("path")
    return pc.sort_indices(pa.table(keys), sort_keys=[(k, "ascending", "at_start") for k in keys])


def _write_manifest(storage: Storage, plan: SnapshotPlan, entries: pa.Table, content: str) -> ManifestRecord:
    return write_manifest_record(storage, entries, plan.converted.schema, plan.spec, plan.snapshot_id,
                                 plan.sequence_number, content=content, format_version=plan.format_version,
                                 attempt=plan.attempt)


def two_at_a_time(write: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``write`` over ``items`` in order, two at a time when there is more than one (the takes, the encoders
    and the compression release the GIL for most of their work)."""
    if len(items) <= 1:
        return [write(item) for item in items]
    with ThreadPoolExecutor(max_workers=MANIFEST_WRITERS) as pool:
        return list(pool.map(write, items))


def write_entry_manifests(storage: Storage, plan: SnapshotPlan, entries: pa.Table, *, content: str = "data",
                          rows_per_manifest: int = MANIFEST_ROWS) -> list[ManifestRecord]:
    """Manifests of ``rows_per_manifest`` consecutive entries each, written two at a time."""
    slices = [entries.slice(offset, rows_per_manifest) for offset in range(0, entries.num_rows, rows_per_manifest)]
    return two_at_a_time(lambda part: _write_manifest(storage, plan, part, content), slices)


def write_file_manifests(storage: Storage, plan: SnapshotPlan, files: pa.Table, *,
                         rows_per_manifest: int = MANIFEST_ROWS, order: pa.Array | None = None) -> list[ManifestRecord]:
    """Manifests (data, then deletes) adding ``files`` in the snapshot of ``plan``.

    The files are put in pruning order once (``order``, when the caller already has ``pruning_order(files)``);
    then each manifest's share is taken, turned into entries and written on its own, two at a time: no table of
    every entry is ever in memory, and the takes, the stats parsing and the encoding of two manifests run side
    by side.
    """
    # Takes of a few rows from each of many chunks cost several times one copy into a single chunk (and a
    # caller that passed its only reference frees the chunks here).
    files = _entry_inputs(files).combine_chunks()
    if order is None:
        order = pruning_order(files, plan)

    def write(offset: int) -> tuple[ManifestRecord, pa.Table | None]:
        entries = _entries_in_order(storage, plan, files.take(order.slice(offset, rows_per_manifest)))
        return _write_manifest(storage, plan, entries.data, "data"), entries.deletes

    written = two_at_a_time(write, range(0, files.num_rows, rows_per_manifest))
    records = [record for record, _ in written]
    deletes = [d for _, d in written if d is not None]
    if deletes:
        records += write_entry_manifests(storage, plan, pa.concat_tables(deletes), content="deletes",
                                         rows_per_manifest=rows_per_manifest)
    return records


def added_rows(records: list[ManifestRecord], content: int) -> tuple[int, int]:
    """(files, rows) added by manifests of ``content`` (0 data, 1 position deletes)."""
    chosen = [r.info for r in records if r.info.content == content]
    return sum(i.added_files_count for i in chosen), sum(i.added_rows_count for i in chosen)
