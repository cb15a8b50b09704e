"""Partition values as a JSON add line wrote them: a key that holds null stays, a key the line does not have goes.

pyarrow's JSON reader types ``partitionValues`` as a struct (of the partition columns, or of the keys it saw), where a
missing key and a null value both read as null. The protocol tells them apart: null is the null partition, a missing
key a file that breaks "values for all partition columns present in the schema MUST be present for all files"
(which the replay refuses). Only add lines with a null value are looked at again, one line at a time with Python's
JSON parser (exact, and no cost on a log without null partition values).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy


def without_absent_keys(partition_values: pa.MapArray, is_add: pa.Array | pa.ChunkedArray | np.ndarray,
                        lines: bytes | memoryview) -> pa.MapArray:
    """``partition_values`` (one map per line of ``lines``, NDJSON, every line ending with a newline) without the
    null entries of add rows whose line has no such key."""
    if not len(partition_values) or partition_values.null_count == len(partition_values):
        return partition_values
    # A sliced map's offsets point into its unsliced keys and items.
    absolute = to_numpy(partition_values.offsets)
    first, end = int(absolute[0]), int(absolute[-1])
    offsets = absolute - first
    keys = partition_values.keys.slice(first, end - first)
    items = partition_values.items.slice(first, end - first)
    null_entries = np.flatnonzero(~to_numpy(items.is_valid())) if items.null_count else np.empty(0, np.int64)
    if not len(null_entries):
        return partition_values
    entry_rows = np.searchsorted(offsets, null_entries, side="right") - 1
    # Only a log with null partition values gets here: the add flags are turned into numpy for it alone.
    of_adds = (is_add if isinstance(is_add, np.ndarray) else to_numpy(is_add))[entry_rows]
    if not of_adds.any():
        return partition_values
    null_entries, entry_rows = null_entries[of_adds], entry_rows[of_adds]
    names = keys.take(from_numpy(null_entries)).to_pylist()
    data = np.frombuffer(lines, np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(data == 10) + 1))
    drop = np.zeros(len(items), dtype=bool)
    written: dict[int, set[str] | None] = {}
    for entry, row, name in zip(null_entries.tolist(), entry_rows.tolist(), names, strict=True):
        if row not in written:
            written[row] = _written_keys(data[starts[row]:starts[row + 1]].tobytes())
        keys_written = written[row]
        drop[entry] = keys_written is not None and name not in keys_written
    if not drop.any():
        return partition_values
    keep = ~drop
    new_offsets = np.concatenate(([0], np.cumsum(keep)))[offsets].astype(np.int32)
    mask = from_numpy(keep)
    return pa.MapArray.from_arrays(from_numpy(new_offsets), keys.filter(mask), items.filter(mask),
                                   mask=partition_values.is_null())


def _written_keys(line: bytes) -> set[str] | None:
    """The keys of the add's partitionValues object in one line; None when the line is not such an object (the
    columnar parse has read it already, and its checks stand)."""
    try:
        action = json.loads(line)
    except ValueError:
        return None
    values = action.get("add", {}).get("partitionValues") if isinstance(action, dict) else None
    return set(values) if isinstance(values, dict) else None
