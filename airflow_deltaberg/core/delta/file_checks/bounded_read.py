"""Column values of a data file read in bounded slices under a memory budget, for the data checks that read values
(``validate --data-checks``, ``convert --verify-stats``: the columns whose footer statistics cannot answer).

A Parquet file can decode to far more than it holds: 100M rows of one int64 value without statistics are 220 KB
on disk and 0.8 GB in Arrow (the whole column read at once took 1.7 GB). Here a file is read one row group at a
time, in slices of at most 64K rows sized from the footer so that one slice stays well inside the budget; the Arrow
memory allocated while reading is measured after each slice, and a file that needs more than the budget (a column
chunk whose pages decompress to more, or slices that outgrow it) is refused with DataCheckMemoryError naming the
budget and the file. The budget is ``DEFAULT_BUDGET`` (512 MB), or ``DELTABERG_DATA_CHECK_MEMORY_MB``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core.errors import DataCheckMemoryError

DEFAULT_BUDGET = 512 << 20
BUDGET_ENV = "DELTABERG_DATA_CHECK_MEMORY_MB"
MAX_SLICE_ROWS = 65536
_STREAM_BUFFER = 1 << 20
_FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def memory_budget() -> int:
    """The data checks' memory budget in bytes: ``DELTABERG_DATA_CHECK_MEMORY_MB`` (a positive whole number of MB)
    or 512 MB."""
    raw = os.environ.get(BUDGET_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_BUDGET
    try:
        megabytes = int(raw)
    except ValueError:
        megabytes = 0
    if megabytes <= 0:
        raise ValueError(f"{BUDGET_ENV} must be a positive whole number of MB, not {raw!r}")
    return megabytes << 20


def column_slices(source: pa.NativeFile, metadata: pq.FileMetaData, names: Sequence[str], *, table: str,
                  location: str, budget: int | None = None) -> Iterator[pa.Table]:
    """The top-level columns ``names`` of the Parquet file ``source`` (whose footer is ``metadata``), in row order,
    as tables of at most MAX_SLICE_ROWS rows (one empty table for a file without rows). Top-level string and binary
    columns come dictionary-encoded (``used_values``): a long value repeated is held once, not once a row. Raises
    DataCheckMemoryError naming ``table`` and ``location`` when reading needs more Arrow memory than ``budget``
    (bytes; ``memory_budget()`` by default)."""
    budget = memory_budget() if budget is None else budget
    schema = metadata.schema.to_arrow_schema()
    byte_columns = [f.name for f in schema if f.name in set(names) and _is_bytes(f.type)]
    # A buffered stream, not a column chunk read (or pre-buffered) whole: a slice holds the pages it decodes.
    parquet = pq.ParquetFile(source, metadata=metadata, read_dictionary=byte_columns or None, pre_buffer=False,
                             buffer_size=_STREAM_BUFFER)
    leaves = _leaves(schema, names, metadata.num_columns)
    empty = True
    for g in range(metadata.num_row_groups):
        row_group = metadata.row_group(g)
        if row_group.num_rows == 0:
            continue
        row_bytes = 0
        for leaf in leaves:
            chunk = row_group.column(leaf)
            if chunk.total_uncompressed_size > budget:
                _refuse(budget, f"column {metadata.schema.column(leaf).path!r} of row group {g} decompresses to "
                                f"{chunk.total_uncompressed_size} bytes", table, location)
            row_bytes += 1 + _value_bytes(metadata.schema.column(leaf), chunk)
        rows = max(1, min(MAX_SLICE_ROWS, budget // 8 // max(1, row_bytes)))
        start = pa.total_allocated_bytes()
        batches = parquet.iter_batches(batch_size=rows, row_groups=[g], columns=list(names), use_threads=False)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except MemoryError as exc:  # ArrowMemoryError too: the process's own limit came first
                raise _refusal(budget, f"the process ran out of memory reading row group {g}", table,
                               location) from exc
            used = pa.total_allocated_bytes() - start
            if used > budget:
                _refuse(budget, f"row group {g} took {used} bytes after {batch.num_rows}-row slices", table, location)
            empty = False
            yield pa.Table.from_batches([batch])
    if empty:
        yield schema.empty_table().select(list(names))


def used_values(values: pa.Array) -> pa.Array:
    """The values a dictionary-encoded array uses (each once, nulls dropped); any other array as it is."""
    if not pa.types.is_dictionary(values.type):
        return values
    return values.dictionary.take(pc.unique(values.indices).drop_null())


def _is_bytes(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _refuse(budget: int, why: str, table: str, location: str) -> None:
    raise _refusal(budget, why, table, location)


def _refusal(budget: int, why: str, table: str, location: str) -> DataCheckMemoryError:
    return DataCheckMemoryError(
        f"checking the data file's values needs more than the data checks' memory budget of {budget >> 20} MB "
        f"({why}); nothing was checked beyond it. Raise {BUDGET_ENV} to check such a file", table=table,
        file=location)


def _value_bytes(column: pq.ColumnSchema, chunk: pq.ColumnChunkMetaData) -> int:
    """Bytes of one decoded value: the physical width, or for byte arrays the chunk's average (at least 16)."""
    if column.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return int(column.length or 16)
    width = _FIXED_WIDTH.get(column.physical_type)
    if width is not None:
        return width
    return max(16, chunk.total_uncompressed_size // max(1, chunk.num_values))


def _leaves(schema: pa.Schema, names: Sequence[str], total: int) -> list[int]:
    """The Parquet leaf column indexes of the top-level fields ``names`` (leaves are numbered depth first)."""
    wanted = set(names)
    out: list[int] = []
    first = 0
    for field in schema:
        count = _leaf_count(field.type)
        if field.name in wanted:
            out.extend(range(first, first + count))
        first += count
    return out if first == total else list(range(total))  # a layout not understood: every leaf (smaller slices)


def _leaf_count(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1
