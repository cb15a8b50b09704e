"""Delta deletion vectors -> Iceberg v2 position delete files and their delete-manifest entries.

One delete file per data file with a DV (file-scoped, as Iceberg's own writers default to since 1.8): each
maps 1:1 to a Delta DV, carries ``referenced_data_file`` and equal lower/upper ``file_path`` bounds so readers
apply it to exactly one data file, and its name derives from the data file location and the DV's uniqueId,
so an unchanged DV keeps its delete file across conversions and re-running a conversion converges.

References: Iceberg table spec "Position Delete Files" (file_path id 2147483546, pos id 2147483545, rows
sorted by file_path then pos), "Manifests" (content 1 = position deletes) and "Sequence Numbers".
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import read_deletion_vectors
from airflow_deltaberg.core.delta.file_checks.file_tables import dv_unique_id
from airflow_deltaberg.core.errors import CorruptLogError, DeleteFileMismatchError
from airflow_deltaberg.core.iceberg.publish import METADATA_DIR
from airflow_deltaberg.core.storage import Storage

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID: str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID: str(POS_ID).encode()}),
    ]
)
#: Part of every delete file's name: change it when the written content changes, so no old file is reused.
NAME_VERSION = "deltaberg-position-deletes-v1"
BATCH_FILES = 1024
W = TypeVar("W")


@dataclass(frozen=True)
class _Written:
    key: str
    record_count: int
    size: int
    column_sizes: tuple[int, int]
    min_pos: int
    max_pos: int


def delete_file_key(data_file_path: str, descriptor: Mapping[str, Any], key_prefix: str = METADATA_DIR) -> str:
    """The deterministic key of the delete file for one data file location and its DV."""
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"{NAME_VERSION}:{data_file_path}:{dv_unique_id(descriptor)}")
    return f"{key_prefix}/{name}-deletes.parquet"


def _encode(data_file_path: str, positions: np.ndarray) -> bytes:
    # The path column as a one-entry dictionary: the same parquet bytes as a string column, without a copy
    # of the path per row in memory. No Arrow schema is stored, so readers see a plain string column.
    paths = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(positions), np.int32)),
                                           pa.array([data_file_path], pa.string()))
    schema = POSITION_DELETE_SCHEMA.set(0, POSITION_DELETE_SCHEMA.field(0).with_type(paths.type))
    table = pa.table([paths, pa.array(positions.astype(np.int64))], schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", store_schema=False)
    return sink.getvalue().to_pybytes()


def _column_sizes(metadata: pq.FileMetaData) -> tuple[int, int]:
    sizes = [0, 0]
    for g in range(metadata.num_row_groups):
        for c in range(2):
            sizes[c] += metadata.row_group(g).column(c).total_compressed_size
    return sizes[0], sizes[1]


def _write_one(storage: Storage, key: str, data_file_path: str, positions: np.ndarray) -> _Written:
    """Write the delete file at ``key``, or reuse the one a previous run wrote there (same name, same rows)."""
    if storage.exists(key):
        fs, path = storage.arrow_path(key)
        size = fs.get_file_info(path).size
        metadata = pq.read_metadata(path, filesystem=fs)
        if metadata.num_rows != len(positions):
            raise DeleteFileMismatchError(
                f"{storage.uri(key)} holds {metadata.num_rows} deletes, the deletion vector of {data_file_path} "
                f"{len(positions)}; remove the file and convert again"
            )
    else:
        # A plain atomic write: a concurrent run writing the same name writes the same rows.
        data = _encode(data_file_path, positions)
        storage.replace(key, data)
        size = len(data)
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    return _Written(key, len(positions), size, _column_sizes(metadata), int(positions[0]), int(positions[-1]))


def _kv(keys: tuple[int, int], values: list[tuple[Any, Any]], value_type: pa.DataType) -> pa.Array:
    items = [[{"key": keys[0], "value": a}, {"key": keys[1], "value": b}] for a, b in values]
    return pa.array(items, pa.list_(pa.struct([("key", pa.int32()), ("value", value_type)])))


def added_delete_entries(files: pa.Table, rows: np.ndarray, keys: list[str], storage: Storage, *, file_format: str,
                         snapshot_id: int, sequence_number: int) -> dict[str, Any]:
    """The columns every ADDED position-delete entry has: status, snapshot and sequence, content 1, the delete
    files at ``keys`` in ``file_format``, and the partition of the data files at ``rows`` of ``files``."""
    n = len(keys)
    columns: dict[str, Any] = {
        "status": pa.array(np.ones(n, np.int32)),
        "snapshot_id": pa.array(np.full(n, snapshot_id, np.int64)),
        "sequence_number": pa.array(np.full(n, sequence_number, np.int64)),
        "file_sequence_number": pa.array(np.full(n, sequence_number, np.int64)),
        "content": pa.array(np.ones(n, np.int32)),
        "file_path": pa.array([storage.uri(key) for key in keys], pa.string()),
        "file_format": pa.array([file_format] * n, pa.string()),
    }
    if "partition" in files.column_names:
        columns["partition"] = files.column("partition").take(pa.array(rows, pa.int64())).combine_chunks()
    return columns


def _entries(
    files: pa.Table, rows: np.ndarray, written: list[_Written], storage: Storage, snapshot_id: int, sequence_number: int
) -> pa.Table:
    n = len(written)
    paths = files.column("file_path").take(pa.array(rows, pa.int64())).combine_chunks()
    path_bytes = [p.encode() for p in paths.to_pylist()]
    ids = (FILE_PATH_ID, POS_ID)
    columns = added_delete_entries(files, rows, [w.key for w in written], storage, file_format="PARQUET",
                                   snapshot_id=snapshot_id, sequence_number=sequence_number)
    columns.update(
        {
            "record_count": pa.array([w.record_count for w in written], pa.int64()),
            "file_size_in_bytes": pa.array([w.size for w in written], pa.int64()),
            "column_sizes": _kv(ids, [w.column_sizes for w in written], pa.int64()),
            "value_counts": _kv(ids, [(w.record_count, w.record_count) for w in written], pa.int64()),
            "null_value_counts": _kv(ids, [(0, 0)] * n, pa.int64()),
            "lower_bounds": _kv(ids, [(p, struct.pack("<q", w.min_pos)) for p, w in zip(path_bytes, written,
                                                                                         strict=True)], pa.binary()),
            "upper_bounds": _kv(ids, [(p, struct.pack("<q", w.max_pos)) for p, w in zip(path_bytes, written,
                                                                                         strict=True)], pa.binary()),
            "sort_order_id": pa.nulls(n, pa.int32()),
            "referenced_data_file": paths.cast(pa.string()),
        }
    )
    return pa.table(columns)


def write_position_deletes(
    storage: Storage,
    files: pa.Table,
    *,
    sequence_number: int,
    snapshot_id: int,
    key_prefix: str = METADATA_DIR,
    threads: int = 8,
) -> pa.Table:
    """Write a position delete file for every row of ``files`` with a deletion vector; return their entries.

    ``files`` has ``file_path`` (the data file's Iceberg location), ``deletionVector`` (the Delta descriptor
    struct, null where none), optionally ``partition`` (the data file's partition struct; required for
    partitioned specs) and ``record_count`` (the data file's rows, to check every position is inside it).
    ``storage`` is rooted at the Delta table: DVs are read from it and delete files written below
    ``key_prefix``. Returns ADDED content=1 entries in ``write_manifest``'s column layout (use
    ``content="deletes"``), in the order of ``files``; the same inputs give the same files and entries.
    """
    kept, written = write_per_deletion_vector(
        storage, files, lambda path, descriptor: delete_file_key(path, descriptor, key_prefix), _write_one, threads)
    return _entries(files, kept, written, storage, snapshot_id, sequence_number)


def write_per_deletion_vector(
    storage: Storage,
    files: pa.Table,
    key_of: Callable[[str, Mapping[str, Any]], str],
    write_one: Callable[[Storage, str, str, np.ndarray], W],
    threads: int,
) -> tuple[np.ndarray, list[W]]:
    """For each row of ``files`` with a non-empty deletion vector: its positions read (``BATCH_FILES`` descriptors
    at a time) and checked against the data file's ``record_count``, then ``write_one(storage, key, data file
    path, positions)`` with ``key = key_of(path, descriptor)``, on ``threads`` threads. Returns the rows written
    for and what ``write_one`` returned, in the order of ``files``."""
    dv = files.column("deletionVector").combine_chunks()
    rows = np.flatnonzero(np.asarray(dv.is_valid()))
    descriptors = dv.take(pa.array(rows, pa.int64())).to_pylist()
    paths = files.column("file_path").take(pa.array(rows, pa.int64())).to_pylist()
    counts = (files.column("record_count").take(pa.array(rows, pa.int64())).to_pylist()
              if "record_count" in files.column_names else [None] * len(rows))
    kept: list[int] = []
    written: list[W] = []
    with ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
        for start in range(0, len(rows), BATCH_FILES):
            batch = slice(start, start + BATCH_FILES)
            vectors = read_deletion_vectors(storage, descriptors[batch], threads=threads)
            jobs = []
            for i, positions in enumerate(vectors, start):
                if len(positions) == 0:
                    continue  # an empty DV deletes nothing: nothing to write
                _check_positions(storage, paths[i], descriptors[i], counts[i], positions)
                kept.append(int(rows[i]))
                jobs.append((key_of(paths[i], descriptors[i]), paths[i], positions))
            written.extend(pool.map(lambda job: write_one(storage, *job), jobs))
    return np.asarray(kept, np.int64), written


def _check_positions(
    storage: Storage, path: str, descriptor: Mapping[str, Any], count: int | None, positions: np.ndarray
) -> None:
    if count is not None and int(positions[-1]) >= count:
        raise CorruptLogError(
            f"the deletion vector {dv_unique_id(descriptor)} deletes row {int(positions[-1])} of {path}, which has "
            f"{count} rows", table=storage.root)
