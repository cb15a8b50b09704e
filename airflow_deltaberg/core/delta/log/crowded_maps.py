"""Add and remove lines whose free-key objects (``partitionValues``, ``tags``) hold very many keys, refused before
the columnar parse. pyarrow's JSON reader infers one struct field per distinct key (~80 us a key: one add with
3e5 keys in its partitionValues took 28 s and 1.4 GB); such a line is long, so only long lines are looked at, and
only those with many quotes are parsed (Python's JSON parser: linear in the line's bytes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from airflow_deltaberg.core.errors import CorruptLogError

#: The most keys a line's partitionValues or tags may hold (no table has that many partition columns; Delta
#: writers tag a file with a few keys).
MAX_MAP_KEYS = 1000
#: Lines up to this length are parsed by pyarrow as they are (they hold at most a few thousand keys).
LONG_LINE = 16 << 10
# Unescaped quotes of an add line's own fields (keys and string values, deletion vector, ...), with room to spare;
# every key of a free-key object adds four (key and value).
_OWN_QUOTES = 200


def refuse_crowded_maps(payload: bytes | memoryview, longest: int, partition_columns: Sequence[str] | None, *,
                        table: str, version: int, file: str) -> None:
    """Raise CorruptLogError naming the file and the add's path when a line of ``payload`` (add/remove lines of
    one log file, each ending with a newline) has a partitionValues key that is not a partition column (when
    ``partition_columns``, physical names, are known) or more than MAX_MAP_KEYS keys in partitionValues or
    tags, among the lines longer than LONG_LINE with many quotes. Other lines cost nothing."""
    if longest <= LONG_LINE:
        return
    data = np.frombuffer(payload, np.uint8)
    ends = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], ends[:-1] + 1))
    columns = set(partition_columns) if partition_columns is not None else None
    quotes_allowed = _OWN_QUOTES + 4 * (len(columns) if columns is not None else 0)
    view = memoryview(payload)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start <= LONG_LINE:
            continue
        line = bytes(view[start:end])
        if line.count(b'"') - line.count(b'\\"') <= quotes_allowed:
            continue
        problem = _problem(line, columns)
        if problem is not None:
            raise CorruptLogError(problem, table=table, version=version, file=file)


def _problem(line: bytes, columns: set[str] | None) -> str | None:
    try:
        action = json.loads(line)
    except ValueError:
        return None  # the columnar parse names the broken line
    body = next(iter(action.values()), None) if isinstance(action, dict) and len(action) == 1 else None
    if not isinstance(body, dict):
        return None
    kind = next(iter(action))
    values, tags = body.get("partitionValues"), body.get("tags")
    path = body.get("path")
    if isinstance(values, dict) and columns is not None:
        unknown = [k for k in values if k not in columns]
        if unknown:
            return (f"the {kind} of {path!r} has {len(unknown)} partitionValues key(s) that are not partition "
                    f"columns (first {unknown[0]!r}); partitionValues maps the partition columns to values")
    for name, mapping in (("partitionValues", values), ("tags", tags)):
        if isinstance(mapping, dict) and len(mapping) > MAX_MAP_KEYS:
            return f"the {kind} of {path!r} has {len(mapping)} keys in its {name}, more than {MAX_MAP_KEYS}"
    return None
