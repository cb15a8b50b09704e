"""The manifests of one Iceberg snapshot's new files: data manifests, and position-delete files with their
delete manifests for files that carry Delta deletion vectors.

``SnapshotPlan`` holds the fixed facts of the snapshot being written and is picklable. A full conversion's
manifests are planned here once for every engine: the live files in ``pruning_order``, cut into ``ManifestGroups``
of ``MANIFEST_ROWS`` files, one data manifest each; ``write_group`` writes one group (its data manifest, and the
delete files and delete entries of its deletion vectors). A ``ManifestEngine`` maps ``write_group`` over the
groups: ``in_process`` (two at a time in this process) or ``SparkManifestEngine`` (``airflow_deltaberg.spark.
manifest_engine``, one group per task); ``write_groups`` then writes the delete manifests of the groups' delete
entries, in group order. Both engines give the same entries in the same manifests by construction.

A full conversion (``write_snapshot_manifests``) holds no table of every file with its stats: its groups are spilled
to files (``manifest_spill.SpilledGroups``) as the stats are read; ``ManifestGroups`` holds a table of files given
whole (``write_file_manifests``).
"""

from __future__ import annotations

import math
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.delta.file_checks.file_tables import MANIFEST_INPUT_COLUMNS
from airflow_deltaberg.core.delta.models import Metadata, Protocol
from airflow_deltaberg.core.delta.partition_codec import partition_strings
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.delta.stats.stats import parse_stats
from airflow_deltaberg.core.errors import StatsParseError
from airflow_deltaberg.core.iceberg.conversion_state import ManifestRecord, attempt_prefix, write_manifest_record
from airflow_deltaberg.core.iceberg.data_files import entries_for_files
from airflow_deltaberg.core.iceberg.deletes.deletion_vector_files import write_deletion_vectors
from airflow_deltaberg.core.iceberg.deletes.position_deletes import write_position_deletes
from airflow_deltaberg.core.iceberg.manifests.manifest_spill import (
    SpillArea,
    SpilledGroups,
    local_spill_area,
    spill_groups,
)
from airflow_deltaberg.core.iceberg.publish import METADATA_DIR
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
    metadata: Metadata  # the Delta metaData in force at delta_version
    converted: ConvertedSchema
    spec: PartitionSpec
    snapshot_id: int
    sequence_number: int
    format_version: int = 2  # Iceberg table format: 3 writes deletion vectors in Puffin files
    protocol: Protocol | None = None  # the Delta protocol in force at delta_version, kept in the conversion state
    # Iceberg table properties this run sets (``table_properties.SETTABLE``); the table keeps them for later runs.
    table_properties: Mapping[str, str] = field(default_factory=dict)
    # Every file this attempt at the snapshot writes under a fresh name holds this id, so that a failed attempt's
    # files can be found and deleted (two runs racing for the same snapshot have different ids).
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)

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


def _entry_inputs(files: pa.Table) -> pa.Table:
    # The JSON stats are only needed where no parsed ones are there.
    wanted = [c for c in MANIFEST_INPUT_COLUMNS if c in files.column_names]
    if "stats_parsed" in wanted and "stats" in wanted:
        wanted.remove("stats")
    return files.select(wanted)


def pruning_order(files: pa.Table, plan: SnapshotPlan) -> pa.Array:
    """Row order of ``files`` (its columns path and partitionValues suffice) by partition values then path, so
    each manifest covers a narrow partition range (readers prune whole manifests by their partition summaries)
    and a narrow path range (removals rewrite few). Partition values sort as their Delta strings, which groups
    equal values, all a manifest's summary needs."""
    metadata, spec = plan.metadata, plan.spec
    physical = dict(zip(metadata.partition_columns, metadata.physical_partition_columns, strict=True))
    order = to_numpy(pc.array_sort_indices(files.column("path"), null_placement="at_start")).astype(np.int64)
    if spec.fields and files.num_rows:
        values = files.column("partitionValues").combine_chunks()
        # Stable sorts by each partition key's rank, last key first, on top of the path order: the order of a sort
        # by all the keys then the path, for a fraction of its string comparisons (a partition key has few values).
        for pf in reversed(spec.fields):
            ranks = _string_ranks(partition_strings(values, physical[pf.name]))
            order = order[np.argsort(ranks[order], kind="stable")]
    return from_numpy(order)


def _string_ranks(strings: pa.Array) -> np.ndarray:
    """Each string's rank among the distinct strings in byte order, null first."""
    encoded = pc.dictionary_encode(strings, null_encoding="encode")  # null is a value of the dictionary
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    size = len(encoded.dictionary)
    dictionary_rank = np.empty(size, np.int32)
    dictionary_rank[to_numpy(pc.array_sort_indices(encoded.dictionary, null_placement="at_start"))] = \
        np.arange(size, dtype=np.int32)
    return dictionary_rank[to_numpy(encoded.indices)]


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
                          rows_per_manifest: int | None = None) -> list[ManifestRecord]:
    """Manifests of ``rows_per_manifest`` consecutive entries each, written two at a time."""
    rows = rows_per_manifest or MANIFEST_ROWS
    slices = [entries.slice(offset, rows) for offset in range(0, entries.num_rows, rows)]
    return two_at_a_time(lambda part: _write_manifest(storage, plan, part, content), slices)


# -- the manifests of a full snapshot: files in pruning order, one group per data manifest ------------------------


@dataclass(frozen=True)
class ManifestGroups:
    """The files of a snapshot in pruning order, cut into groups of ``rows_per_manifest`` consecutive files: group
    ``i`` is the ``i``-th data manifest. Each group is taken from ``files`` only when asked for."""

    files: pa.Table  # MANIFEST_INPUT_COLUMNS, one chunk
    order: pa.Array  # row indices of files, in pruning order
    rows_per_manifest: int

    def __len__(self) -> int:
        return math.ceil(self.files.num_rows / self.rows_per_manifest)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    def group(self, index: int) -> pa.Table:
        """The files of group ``index``, in pruning order."""
        return self.files.take(self.order.slice(index * self.rows_per_manifest, self.rows_per_manifest))


@dataclass(frozen=True)
class GroupManifests:
    """What writing one group gives: its data manifest, and the delete entries (position deletes in v2, deletion
    vectors in v3; their files written already) of its files that have a deletion vector."""

    data: ManifestRecord
    deletes: pa.Table | None


def write_group(storage: Storage, plan: SnapshotPlan, files: pa.Table) -> GroupManifests:
    """The data manifest of one group of files (in their order), and the delete files of their deletion
    vectors: the one function both engines apply to every group."""
    entries = _entries_in_order(storage, plan, files)
    return GroupManifests(_write_manifest(storage, plan, entries.data, "data"), entries.deletes)


#: The groups of a snapshot: held in memory (``ManifestGroups``) or spilled to files (``manifest_spill``); both have
#: ``len()``, ``group(i)``, ``num_files`` and ``rows_per_manifest``.
Groups = ManifestGroups | SpilledGroups

class ManifestEngine(typing.Protocol):
    """How the groups of a snapshot get written: ``write_group`` over every group, results in group order.
    ``InProcessEngine`` below; ``airflow_deltaberg.spark.manifest_engine.SparkManifestEngine`` distributes the groups
    to Spark executors."""

    #: True when the engine's workers read the groups themselves: a full conversion then spills them under the
    #: table's ``_iceberg/metadata`` instead of a local temporary folder.
    spills_in_table: bool

    def __call__(self, storage: Storage, plan: SnapshotPlan, groups: Groups) -> list[GroupManifests]: ...


class InProcessEngine:
    """The ``ManifestEngine`` that writes the groups in this process, two at a time: each group is taken from the
    files just before it is written, so no table of every entry is ever in memory."""

    spills_in_table = False

    def __call__(self, storage: Storage, plan: SnapshotPlan, groups: Groups) -> list[GroupManifests]:
        return two_at_a_time(lambda i: write_group(storage, plan, groups.group(i)), range(len(groups)))


#: The default engine.
in_process: ManifestEngine = InProcessEngine()


def manifest_groups(plan: SnapshotPlan, files: pa.Table, *, rows_per_manifest: int | None = None,
                    order: pa.Array | None = None) -> ManifestGroups:
    """``files`` cut into the groups of their data manifests (``order``: ``pruning_order(files)`` when the caller
    has it already)."""
    # Takes of a few rows from each of many chunks cost several times one copy into a single chunk (and a
    # caller that passed its only reference frees the chunks here).
    files = _entry_inputs(files).combine_chunks()
    if order is None:
        order = pruning_order(files, plan)
    return ManifestGroups(files, order, rows_per_manifest or MANIFEST_ROWS)


def write_file_manifests(storage: Storage, plan: SnapshotPlan, files: pa.Table, *,
                         rows_per_manifest: int | None = None, order: pa.Array | None = None,
                         engine: ManifestEngine = in_process) -> list[ManifestRecord]:
    """Manifests (data, then deletes) adding ``files`` in the snapshot of ``plan``: the files in pruning order,
    one data manifest per group of ``rows_per_manifest`` (``MANIFEST_ROWS``) of them written by ``engine``, then
    the delete manifests of the groups' delete entries, in group order."""
    return write_groups(storage, plan, manifest_groups(plan, files, rows_per_manifest=rows_per_manifest, order=order),
                        engine)


def write_groups(storage: Storage, plan: SnapshotPlan, groups: Groups, engine: ManifestEngine) -> list[ManifestRecord]:
    """The data manifests of ``groups`` written by ``engine``, then the delete manifests of their delete entries, in
    group order."""
    written = engine(storage, plan, groups)
    records = [group.data for group in written]
    deletes = [group.deletes for group in written if group.deletes is not None]
    if deletes:
        records += write_entry_manifests(storage, plan, pa.concat_tables(deletes), content="deletes",
                                         rows_per_manifest=groups.rows_per_manifest)
    return records


def write_snapshot_manifests(storage: Storage, plan: SnapshotPlan, snapshot: Snapshot,
                             engine: ManifestEngine = in_process) -> list[ManifestRecord]:
    """The manifests of a full conversion of ``snapshot``: its live files (stats read by the core's Snapshot),
    written by ``engine``.

    The files never are in memory all at once: their pruning order is sorted from their paths and partition values
    alone (on a thread of its own while the first stats are read), then the files are read a chunk at a time with
    their stats and routed to the spill files of their groups (``manifest_spill``): in a local temporary folder, or
    under the table's ``_iceberg/metadata`` (names holding the attempt's id) for an engine whose workers read the
    groups themselves (``engine.spills_in_table``)."""
    rows = MANIFEST_ROWS
    with _spill_area(storage, plan, engine) as area:
        with ThreadPoolExecutor(max_workers=1) as pool:
            order = pool.submit(pruning_order, snapshot.file_keys(), plan)
            chunks = (_entry_inputs(chunk) for chunk in snapshot.iter_files())
            groups = spill_groups(area, chunks, order.result, snapshot.num_files, rows_per_manifest=rows)
            del order  # the routing has the ranks: the order goes before the groups are written
        try:
            return write_groups(storage, plan, groups, engine)
        finally:
            groups.delete()


@contextmanager
def _spill_area(storage: Storage, plan: SnapshotPlan, engine: ManifestEngine) -> Iterator[SpillArea]:
    if engine.spills_in_table:
        yield SpillArea(plan.table, plan.storage_options, f"{METADATA_DIR}/{attempt_prefix(plan.attempt)}")
    else:
        with local_spill_area() as area:
            yield area


def added_rows(records: list[ManifestRecord], content: int) -> tuple[int, int]:
    """(files, rows) added by manifests of ``content`` (0 data, 1 position deletes)."""
    chosen = [r.info for r in records if r.info.content == content]
    return sum(i.added_files_count for i in chosen), sum(i.added_rows_count for i in chosen)
