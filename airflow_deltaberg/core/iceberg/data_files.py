"""Live Delta files -> Iceberg data file entries (an Arrow table the manifest writer encodes)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec

from airflow_deltaberg.core.delta.file_checks.file_footer import data_file_location, read_file_footer
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.paths import rows_holding
from airflow_deltaberg.core.delta.stats.stats import negative_count
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.metrics import (
    DEFAULT_STRING_PREFIX,
    STRING_PREFIX_PROPERTY,
    file_metrics,
    keyed_columns,
    stat_columns,
)
from airflow_deltaberg.core.iceberg.partition import partition_struct
from airflow_deltaberg.core.iceberg.schema import ConvertedSchema
from airflow_deltaberg.core.storage import Storage


def data_file_locations(storage: Storage, paths: pa.Array) -> pa.Array:
    """Full locations of data files from their log paths (URI-encoded, relative to the table or absolute).

    Relative paths are decoded and their dot segments resolved (core.delta.paths); one that leaves the table
    root raises PathOutsideTableError (snapshot loads refuse those already).
    """
    # Plain relative paths (the common case) are joined column-wise; only paths with escapes, dot segments or a
    # scheme take the per-path route.
    leading = pc.fill_null(pc.or_(pc.starts_with(paths, "/"), pc.starts_with(paths, ".")), False)
    rows = np.union1d(rows_holding(paths, ("%", ":", "/.")), np.flatnonzero(np.asarray(leading)))
    joined = pc.binary_join_element_wise(pa.scalar(storage.root), paths, "/")
    if not len(rows):
        return joined
    fixed = [None if path is None else data_file_location(storage, path)
             for path in paths.take(pa.array(rows)).to_pylist()]
    values = np.asarray(joined.to_pylist(), dtype=object)
    values[rows] = fixed
    return pa.array(values, pa.string())


def _footer_row_count(location: str, storage: Storage, table: str) -> int:
    context = (", and its stats have no numRecords (or 0), so its row count cannot be read; nothing was "
               "converted")
    return read_file_footer(storage, location, table=table, context=context).metadata.num_rows


def record_counts(stats_counts: pa.Array, locations: pa.Array, storage: Storage, table: str) -> pa.Array:
    """numRecords from the stats, or from the parquet footer when the stats lack it or say 0.

    Never lower than the file's rows: Iceberg readers skip files with record_count 0, so a 0 is only written for
    a file whose footer says 0 rows. Counts below 0 are refused before (``check_adds``).
    """
    missing = np.flatnonzero(np.asarray(pc.fill_null(pc.less_equal(stats_counts, 0), True)))
    if not len(missing):
        return stats_counts
    paths = locations.take(pa.array(missing)).to_pylist()
    pool = ThreadPoolExecutor(max_workers=8)
    try:
        counts = list(pool.map(lambda p: _footer_row_count(p, storage, table), paths))
    finally:
        # On the first failure the footers not yet read are not read at all.
        pool.shutdown(wait=True, cancel_futures=True)
    filled = np.asarray(stats_counts.fill_null(0)).copy()
    filled[missing] = counts
    return pa.array(filled, pa.int64())


def check_adds(files: pa.Table, stats: pa.StructArray, locations: pa.Array, table: str) -> None:
    """Refuse adds that break the protocol: a size of 0 or below (a parquet file has a footer), and a numRecords
    or nullCount below 0 (JSON stats are refused so when parsed; this catches a checkpoint's ``stats_parsed``).
    The error names the table, the add's version when ``files`` has a ``version`` column, and the data file."""
    sizes = files.column("size")
    bad_size = pc.fill_null(pc.less_equal(sizes, 0), False)
    problem: tuple[int, str] | None = None
    if pc.any(bad_size).as_py():
        row = int(np.flatnonzero(np.asarray(bad_size))[0])
        problem = row, f"size {sizes[row].as_py()} (a data file has at least its parquet footer)"
    counts = negative_count(stats)
    if counts is not None and (problem is None or counts[0] < problem[0]):
        problem = counts[0], f"stats whose {counts[1]} is below 0 (a count)"
    if problem is None:
        return
    row, what = problem
    version = files.column("version")[row].as_py() if "version" in files.column_names else None
    raise CorruptLogError(f"the add of data file {locations[row].as_py()} has {what}; nothing was converted",
                          table=table, version=version)


#: Iceberg keeps row counts, and their sums in manifest lists and snapshot summaries, as longs.
LONG_LIMIT = 2**63


def check_record_total(counts: pa.Array, files: pa.Table, locations: pa.Array, table: str) -> None:
    """Refuse record counts whose sum does not fit a long: one of them cannot be a file's row count, and the
    manifest list could not hold the sum. The error names the file with the largest count (and its add's version
    when ``files`` has a ``version`` column)."""
    values = np.asarray(counts.fill_null(0), dtype=np.int64)
    if not len(values) or values.sum(dtype=np.float64) < 2.0**62:
        return
    total = sum(int(v) for v in values)  # exact: near the limit numpy would wrap
    if total < LONG_LIMIT:
        return
    row = int(np.argmax(values))
    location = locations[row].as_py()
    version = files.column("version")[row].as_py() if "version" in files.column_names else None
    raise CorruptLogError(f"the numRecords of the data files sum to {total}, beyond the long in which Iceberg keeps "
                          f"row counts: numRecords {int(values[row])} of data file {location} cannot be its row "
                          "count; nothing was converted", table=table, version=version, file=location)


def entries_for_files(
    files: pa.Table,
    metadata: Metadata,
    converted: ConvertedSchema,
    spec: PartitionSpec,
    storage: Storage,
    *,
    table: str,
    snapshot_id: int,
    sequence_number: int,
) -> pa.Table:
    """One ADDED manifest entry per row of ``files`` (path, partitionValues, size, stats_parsed; version, when
    there, names the add in errors)."""
    n = files.num_rows
    mapped = metadata.column_mapping_mode in ("name", "id")
    locations = data_file_locations(storage, files.column("path").combine_chunks())
    stats = files.column("stats_parsed").combine_chunks()
    check_adds(files, stats, locations, table)
    # struct_field, not .field(): under a null stats struct the child's values are undefined.
    counts = record_counts(pc.struct_field(stats, "numRecords"), locations, storage, table)
    check_record_total(counts, files, locations, table)
    prefix = int(metadata.configuration.get(STRING_PREFIX_PROPERTY, DEFAULT_STRING_PREFIX))
    metrics = file_metrics(stats, stat_columns(metadata.schema, converted.schema, mapped), prefix)
    physical = dict(zip(metadata.partition_columns, metadata.physical_partition_columns, strict=True))
    partitions = partition_struct(files.column("partitionValues"), spec, converted.schema, physical, table)
    value_counts = pa.nulls(n, metrics.null_value_counts.type)
    return pa.table(
        {
            "status": pa.array(np.ones(n, dtype=np.int32)),
            "snapshot_id": pa.array(np.full(n, snapshot_id, dtype=np.int64)),
            "sequence_number": pa.array(np.full(n, sequence_number, dtype=np.int64)),
            "file_sequence_number": pa.array(np.full(n, sequence_number, dtype=np.int64)),
            "content": pa.array(np.zeros(n, dtype=np.int32)),
            "file_path": locations,
            "file_format": pa.repeat(pa.scalar("PARQUET", pa.string()), n),
            "partition": partitions,
            "record_count": counts,
            "file_size_in_bytes": files.column("size").combine_chunks(),
            # Delta keeps no column sizes. An empty map says the same as a null one, and pyiceberg's
            # inspect.entries() reads only this map without a null check.
            "column_sizes": keyed_columns([], [], n, pa.int64()),
            "value_counts": value_counts,
            "null_value_counts": metrics.null_value_counts,
            "nan_value_counts": pa.nulls(n, metrics.null_value_counts.type),
            "lower_bounds": metrics.lower_bounds,
            "upper_bounds": metrics.upper_bounds,
            "split_offsets": pa.nulls(n, pa.list_(pa.int64())),
            "sort_order_id": pa.nulls(n, pa.int32()),
            "referenced_data_file": pa.nulls(n, pa.string()),
        }
    )
