"""Reading the actions of JSON log files (commits, JSON checkpoints and sidecars), columnar: the add and remove
lines parsed by pyarrow into ``FILE_CHANGES_SCHEMA`` rows, the other actions as dicts; a line that breaks the
protocol is refused naming its file and line."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from airflow_deltaberg.core.arrow_util import from_numpy, strings, to_numpy
from airflow_deltaberg.core.delta.file_checks.file_tables import (
    ACTION_COLUMNS,
    DV_TYPE,
    FILE_CHANGES_SCHEMA,
    STRING_MAP,
    empty_file_changes,
)
from airflow_deltaberg.core.delta.log.actions import (
    ACTION_NOUNS,
    DV_REQUIRED_FIELDS,
    FILE_KINDS,
    ActionBatch,
    field_or_none,
    missing_required_field,
    normalize_dv,
    one_line,
    partition_columns_of,
)
from airflow_deltaberg.core.delta.log.crowded_maps import refuse_crowded_maps
from airflow_deltaberg.core.delta.log.json_partition_keys import without_absent_keys
from airflow_deltaberg.core.delta.log.utf8 import ndjson_utf8_problem
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.storage import FileEntry, Storage

_MAP_FIELDS = ("partitionValues", "tags")
# What pyarrow is told about add/remove lines when every field is typed (the strict parse): the file change
# columns; partitionValues and tags have free keys, so they are inferred (as structs) and turned into maps
# afterwards.
_JSON_FILE_ACTION = pa.struct([FILE_CHANGES_SCHEMA.field(name) for name in ACTION_COLUMNS if name not in _MAP_FIELDS])
_JSON_LINE_SCHEMA = pa.schema([("add", _JSON_FILE_ACTION), ("remove", _JSON_FILE_ACTION)])
# The fields that (nearly) every add line has: the fast parse types only these and infers the others.
# Naming absent optional fields (deletion vector, row tracking, ...) in the schema makes the reader null-fill
# each of them row by row, which doubled the parse time of a 300k-add commit without stats.
_COMMON_FIELDS = ("path", "size", "modificationTime", "dataChange", "stats")
_TAGS = b'"tags"'  # a key (in stats strings quotes are escaped); may be followed by blanks
_MIN_BLOCK_SIZE = 1 << 20  # small blocks keep both reader threads busy on one big commit
_GROUP_BYTES = 8 << 20  # small commits are parsed together up to about this size


def _line_schema(partition_columns: Sequence[str] | None,
                 maps: dict[tuple[str, str], list[str]] | None = None) -> pa.Schema:
    """The add/remove schema, with partitionValues typed when the partition columns are known, and the
    free-key objects of ``maps`` ((kind, field) -> keys) typed as string values."""
    if partition_columns is None and not maps:
        return _JSON_LINE_SCHEMA
    return _typed_schema(FILE_KINDS, list(_JSON_FILE_ACTION), partition_columns, maps or {})


def _fast_schema(
    kinds: Sequence[str], partition_columns: Sequence[str] | None, maps: dict[tuple[str, str], list[str]]
) -> pa.Schema:
    """The common fields typed, free-key objects typed as string values where their keys are known."""
    return _typed_schema(kinds, [_JSON_FILE_ACTION.field(name) for name in _COMMON_FIELDS], partition_columns, maps)


def _typed_schema(kinds: Sequence[str], fields: list[pa.Field], partition_columns: Sequence[str] | None,
                  maps: dict[tuple[str, str], list[str]]) -> pa.Schema:
    """``fields`` for each action kind, plus its free-key objects whose keys are known (from ``maps``, or the
    partition columns for partitionValues) as structs of strings."""
    out = []
    for kind in kinds:
        typed = list(fields)
        for name in _MAP_FIELDS:
            keys = maps.get((kind, name))
            if keys is None and name == "partitionValues" and partition_columns is not None:
                keys = list(partition_columns)
            if keys is not None:
                typed.append(pa.field(name, pa.struct([(k, pa.string()) for k in keys])))
        out.append((kind, pa.struct(typed)))
    return pa.schema(out)


_ADD = b'{"add"'
_SPACED_FILE_ACTION = re.compile(rb'\s*\{\s*"(add|remove)"\s*:')
_REMOVE = b'{"remove"'
_PREFIX = len(_REMOVE)


def _line_heads(arr: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The first _PREFIX bytes of each line, as rows of a matrix. A line shorter than that reaches its newline
    (or the data's last byte, a newline too), which no prefix contains, so it never matches one."""
    return arr[np.minimum(starts[:, None] + np.arange(_PREFIX), len(arr) - 1)]


def _starts_with(heads: np.ndarray, prefix: bytes) -> np.ndarray:
    return (heads[:, : len(prefix)] == np.frombuffer(prefix, np.uint8)).all(axis=1)


@dataclass(frozen=True)
class SplitLines:
    """The lines of one NDJSON log file, separated into add/remove lines and the other actions."""

    payload: bytes | memoryview  # the add/remove lines, each ending with a newline
    n_file_lines: int
    other: list[tuple[int, bytes]]  # (1-based line number, line) of every other non-blank line
    kinds: tuple[str, ...] = ()  # which of "add", "remove" occur
    longest: int = 0  # bytes of the longest add/remove line


def split_lines(data: bytes) -> SplitLines:
    """Separate add/remove lines from the other actions of one newline-terminated NDJSON log file.

    Works on line starts with numpy, so a 300k-line commit costs no Python loop per line.
    """
    if not data or data.isspace():
        return SplitLines(b"", 0, [])
    arr = np.frombuffer(data, np.uint8)
    newlines = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    # Lines that do not start exactly like this (e.g. with a blank) go to the careful path below.
    heads = _line_heads(arr, starts)
    is_add = _starts_with(heads, _ADD)
    is_remove = _starts_with(heads, _REMOVE)
    other: list[tuple[int, bytes]] = []
    for row in np.flatnonzero(~(is_add | is_remove)).tolist():
        line = data[starts[row] : ends[row]]
        if not line.strip():
            continue
        # An add/remove written with blanks ('{ "add": ...') is still a file action.
        if spaced := _SPACED_FILE_ACTION.match(line):
            (is_add if spaced.group(1) == b"add" else is_remove)[row] = True
        else:
            other.append((row + 1, line))
    is_file = is_add | is_remove
    file_rows = np.flatnonzero(is_file)
    if not file_rows.size:
        return SplitLines(b"", 0, other)
    first, last = int(file_rows[0]), int(file_rows[-1])
    view = memoryview(data)
    if last - first + 1 == len(file_rows):
        # The other actions come before or after the file actions (commitInfo, protocol, metaData): no copy.
        payload: bytes | memoryview = view[starts[first] : ends[last] + 1]
    else:
        runs = np.flatnonzero(np.diff(file_rows) != 1)  # where a run of file lines ends
        run_starts = np.concatenate(([first], file_rows[runs + 1]))
        run_ends = np.concatenate((file_rows[runs], [last]))
        payload = b"".join(view[starts[a] : ends[b] + 1] for a, b in zip(run_starts.tolist(), run_ends.tolist(),
                                                                          strict=True))
    kinds = tuple(k for k, mask in (("add", is_add), ("remove", is_remove)) if mask.any())
    longest = int((ends - starts)[file_rows].max())
    return SplitLines(payload, len(file_rows), other, kinds, longest)


def read_json_actions(
    storage: Storage,
    table: str,
    files: Sequence[tuple[int, FileEntry]],
    *,
    partition_columns: Sequence[str] | None = None,
) -> ActionBatch:
    """Actions of NDJSON log files (commits, JSON checkpoints), in order.

    ``partition_columns`` (physical names) lets the reader type partitionValues instead of inferring
    them; metaData actions inside ``files`` add to it.
    """
    splits: list[tuple[int, SplitLines]] = []
    other: list[tuple[int, str, dict[str, Any]]] = []
    for version, entry in files:
        try:
            data = storage.read(entry.key)
        except FileNotFoundError as exc:
            raise CorruptLogError("a listed log file has disappeared", table=table, version=version,
                                  file=storage.uri(entry.key)) from exc
        text_problem = ndjson_utf8_problem(data)
        if text_problem is not None:
            line_no, problem = text_problem
            raise CorruptLogError(f"line {line_no} {problem}", table=table, version=version,
                                  file=storage.uri(entry.key))
        if data and not data.endswith(b"\n"):
            if not _is_complete_json(data.rsplit(b"\n", 1)[-1]):
                last_line = data.count(b"\n") + 1
                raise CorruptLogError(
                    f"line {last_line} is truncated (the file ends inside a JSON object)",
                    table=table, version=version, file=storage.uri(entry.key),
                )
            data += b"\n"
        split = split_lines(data)
        del data
        for line_no, line in split.other:
            other.append((version, *_parse_other_action(line, line_no, storage, table, version, entry)))
        if split.n_file_lines:
            splits.append((version, split))
    found = partition_columns_of(other)
    if found is not None or partition_columns is not None:
        partition_columns = list(dict.fromkeys([*(partition_columns or []), *(found or [])]))
    entries = dict(files)
    for version, split in splits:
        refuse_crowded_maps(split.payload, split.longest, partition_columns, table=table, version=version,
                            file=storage.uri(entries[version].key))
    # Parse in groups of about _GROUP_BYTES: small commits are joined (one reader call for many), big
    # ones are parsed on their own (no copy).
    tables = []
    group: list[tuple[int, SplitLines]] = []
    group_bytes = 0
    for i, item in enumerate(splits):
        group.append(item)
        group_bytes += len(item[1].payload)
        if group_bytes >= _GROUP_BYTES or i == len(splits) - 1:
            tables.append(_parse_file_lines(storage, table, files, group, partition_columns))
            group, group_bytes = [], 0
    if not tables:
        return ActionBatch(empty_file_changes(), other)
    return ActionBatch(pa.concat_tables(tables) if len(tables) > 1 else tables[0], other)


def _parse_file_lines(
    storage: Storage,
    table: str,
    files: Sequence[tuple[int, FileEntry]],
    group: list[tuple[int, SplitLines]],
    partition_columns: Sequence[str] | None,
) -> pa.Table:
    payload = group[0][1].payload if len(group) == 1 else b"".join(s.payload for _, s in group)
    n_rows = sum(s.n_file_lines for _, s in group)
    kinds = [k for k in ("add", "remove") if any(k in s.kinds for _, s in group)]
    longest = max(s.longest for _, s in group)
    # A block must hold at least one whole line.
    read_options = pj.ReadOptions(block_size=max(_MIN_BLOCK_SIZE, 1 << (2 * longest + 2).bit_length()))
    version_col = from_numpy(np.repeat(np.asarray([v for v, _ in group], dtype=np.int64),
                                       [s.n_file_lines for _, s in group]))
    parsed = _fast_parse(payload, n_rows, kinds, partition_columns, read_options)
    result = None
    if parsed is not None:
        try:
            result = _json_rows_to_file_actions(parsed, version_col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # an inferred value does not fit its protocol type: the strict parse names the line
    if result is None:
        result = _strict_parse(storage, table, files, payload, n_rows, partition_columns, read_options, version_col)
    missing = missing_required_field(result)
    if missing is not None:
        _raise_bad_line(storage, table, files, ValueError(f"an action without {missing[1]}"))
    index = result.schema.get_field_index("partitionValues")
    values = result.column(index).combine_chunks()
    written = without_absent_keys(values, result.column("is_add"), payload)
    return result if written is values else result.set_column(index, "partitionValues", written)


def _strict_parse(
    storage: Storage, table: str, files: Sequence[tuple[int, FileEntry]], payload: bytes | memoryview, n_rows: int,
    partition_columns: Sequence[str] | None, read_options: pj.ReadOptions, version_col: pa.Array,
) -> pa.Table:
    """Every field typed as the protocol says; raises CorruptLogError naming the line that does not fit."""
    # partitionValues stay typed (strings) even when tags force inference: inferred values that look like
    # dates would come back as timestamps. Free keys whose values were inferred as something else than
    # strings are typed as strings in a second parse: a value is read as written, or refused.
    infer = partition_columns is None or _TAGS in bytes(payload)
    maps: dict[tuple[str, str], list[str]] = {}
    while True:
        try:
            parsed = pj.read_json(
                pa.BufferReader(payload),
                read_options=read_options,
                parse_options=pj.ParseOptions(
                    explicit_schema=_line_schema(partition_columns, maps),
                    unexpected_field_behavior="infer" if infer else "ignore",
                ),
            )
        except pa.ArrowInvalid as exc:
            _raise_bad_line(storage, table, files, exc)
        if parsed.num_rows != n_rows or set(parsed.column_names) != {"add", "remove"}:
            _raise_bad_line(storage, table, files, ValueError("the add/remove lines do not parse one row each"))
        retype = _maps_to_retype(parsed) if infer and not maps else {}
        if not retype:
            break
        maps = retype
    try:
        return _json_rows_to_file_actions(parsed, version_col)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        _raise_bad_line(storage, table, files, exc)


def _fast_parse(
    payload: bytes | memoryview, n_rows: int, kinds: Sequence[str], partition_columns: Sequence[str] | None,
    read_options: pj.ReadOptions,
) -> pa.Table | None:
    """Parse with the common fields typed and the rest inferred; None when the result cannot be trusted
    (a parse error, or an inferred type that does not fit the protocol), for the strict parse to redo."""
    maps: dict[tuple[str, str], list[str]] = {}
    for _ in range(2):
        try:
            parsed = pj.read_json(
                pa.BufferReader(payload),
                read_options=read_options,
                parse_options=pj.ParseOptions(explicit_schema=_fast_schema(kinds, partition_columns, maps),
                                              unexpected_field_behavior="infer"),
            )
        except pa.ArrowInvalid:
            return None
        if parsed.num_rows != n_rows or not set(parsed.column_names) <= {"add", "remove"}:
            return None
        retype = _maps_to_retype(parsed)
        if not retype:
            return parsed if _inferred_fields_fit(parsed) else None
        if maps:
            return None
        # Inference turned some partition value or tag into a non-string (e.g. a date-like string into a
        # timestamp): parse again with those keys typed as strings, so the values stay exactly as written.
        maps = retype
    return None


def _maps_to_retype(parsed: pa.Table) -> dict[tuple[str, str], list[str]]:
    out = {}
    for kind in parsed.column_names:
        action = parsed.schema.field(kind).type
        for name in _MAP_FIELDS:
            idx = action.get_field_index(name)
            if idx < 0:
                continue
            typ = action.field(idx).type
            if pa.types.is_struct(typ) and any(not (pa.types.is_string(f.type) or pa.types.is_null(f.type))
                                               for f in typ):
                out[(kind, name)] = [f.name for f in typ]
    return out


def _fits(found: pa.DataType, target: pa.DataType) -> bool:
    """Whether an inferred JSON type converts to ``target`` without changing a value."""
    if pa.types.is_null(found):
        return True
    if pa.types.is_struct(target):
        return pa.types.is_struct(found) and all(
            _fits(f.type, target.field(f.name).type) for f in found if target.get_field_index(f.name) >= 0
        )
    if pa.types.is_integer(target):
        return pa.types.is_integer(found)
    return found == target


def _inferred_fields_fit(parsed: pa.Table) -> bool:
    for kind in parsed.column_names:
        for f in parsed.schema.field(kind).type:
            if f.name in _COMMON_FIELDS or f.name in _MAP_FIELDS or f.name not in ACTION_COLUMNS:
                continue  # typed, converted to maps, or not kept
            if not _fits(f.type, FILE_CHANGES_SCHEMA.field(f.name).type):
                return False
    return True


def _parse_other_action(
    line: bytes, line_no: int, storage: Storage, table: str, version: int, entry: FileEntry
) -> tuple[str, dict[str, Any]]:
    try:
        action = json.loads(line)
        ((name, body),) = action.items()
        if not isinstance(body, dict):
            raise ValueError(f"the {name!r} action is not an object")
    except (ValueError, AttributeError, RecursionError) as exc:  # RecursionError: JSON nested thousands deep
        raise CorruptLogError(f"line {line_no} is not a valid action: {str(exc)[:160]}",
                              table=table, version=version, file=storage.uri(entry.key)) from exc
    return name, body


def _is_complete_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except (ValueError, RecursionError):
        return False


def _raise_bad_line(
    storage: Storage, table: str, files: Sequence[tuple[int, FileEntry]], exc: Exception
) -> NoReturn:
    """Name the file and line at fault once the columnar parse has failed (error path only)."""
    for version, entry in files:
        lines = [(no, line) for no, line in enumerate(storage.read(entry.key).split(b"\n"), start=1)
                 if line.strip() and _is_file_action_line(line)]
        for line_no, line in lines:
            problem = _file_action_problem(line)
            if problem is not None:
                raise CorruptLogError(f"line {line_no} {problem}", table=table, version=version,
                                      file=storage.uri(entry.key)) from exc
        if _parses([line for _, line in lines]):
            continue
        # The smallest failing prefix ends at the culprit (a wrong type, or a type that conflicts with
        # earlier lines); bisect so that a big commit costs a few parses, not one per line.
        low, high = 1, len(lines)
        while low < high:
            mid = (low + high) // 2
            if _parses([line for _, line in lines[:mid]]):
                low = mid + 1
            else:
                high = mid
        line_no = lines[low - 1][0]
        raise CorruptLogError(
            f"line {line_no} does not follow the protocol's schema for add/remove actions: {one_line(exc)}",
            table=table, version=version, file=storage.uri(entry.key),
        ) from exc
    raise CorruptLogError(f"file actions do not follow the protocol's schema: {one_line(exc)}",
                          table=table) from exc


# Protocol types of the add/remove fields that are not objects (JSON integers for the int64/int32 fields).
_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "path": (str, "a string"), "size": (int, "an integer"), "modificationTime": (int, "an integer"),
    "dataChange": (bool, "a boolean"), "stats": (str, "a string"), "baseRowId": (int, "an integer"),
    "defaultRowCommitVersion": (int, "an integer"), "clusteringProvider": (str, "a string"),
    "deletionTimestamp": (int, "an integer"),
}
_DV_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "storageType": (str, "a string"), "pathOrInlineDv": (str, "a string"), "offset": (int, "an integer"),
    "sizeInBytes": (int, "an integer"), "cardinality": (int, "an integer"),
}
_REQUIRED = {"add": ("path", "size", "partitionValues"), "remove": ("path",)}


def _file_action_problem(line: bytes) -> str | None:
    """What is wrong with one add/remove line, as the end of a sentence starting "line N", or None when
    nothing is found (the error path's line-by-line check; the same rules as the columnar parse)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return f"is not valid JSON: {str(exc)[:160]}"
    if not isinstance(value, dict) or len(value) != 1:
        return "is not an object holding one action"
    ((kind, body),) = value.items()
    if kind not in ACTION_NOUNS:
        return f"holds a {kind!r} action where an add or remove action was expected"
    if not isinstance(body, dict):
        return f"holds {ACTION_NOUNS[kind]} action that is not an object"
    for name in _REQUIRED[kind]:
        if body.get(name) is None:
            return f"holds {ACTION_NOUNS[kind]} action without {name}"
    problem = _typed_fields_problem(body, _FIELD_TYPES, kind)
    if problem is not None:
        return problem
    for name in _MAP_FIELDS:
        values = body.get(name)
        if values is None:
            continue
        if not isinstance(values, dict):
            return f"has {kind}.{name} {_short(values)}, which is not an object"
        for key, v in values.items():
            if v is not None and not isinstance(v, str):
                return f"has {kind}.{name}.{key} {_short(v)}, which is not a string"
    dv = body.get("deletionVector")
    if dv is not None:
        if not isinstance(dv, dict):
            return f"has {kind}.deletionVector {_short(dv)}, which is not an object"
        for name in DV_REQUIRED_FIELDS:
            if dv.get(name) is None:
                return f"holds {ACTION_NOUNS[kind]} action whose deletionVector lacks {name}"
        return _typed_fields_problem(dv, _DV_FIELD_TYPES, f"{kind}.deletionVector")
    return None


def _typed_fields_problem(body: dict[str, Any], types: dict[str, tuple[type, str]], prefix: str) -> str | None:
    for name, (typ, what) in types.items():
        v = body.get(name)
        if v is not None and (not isinstance(v, typ) or (typ is int and isinstance(v, bool))):
            return f"has {prefix}.{name} {_short(v)}, which is not {what}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_file_action_line(line: bytes) -> bool:
    """Whether split_lines takes ``line`` for an add/remove line."""
    return line.startswith((_ADD, _REMOVE)) or _SPACED_FILE_ACTION.match(line) is not None


def _parses(lines: list[bytes]) -> bool:
    if not lines:
        return True
    try:
        table = pj.read_json(
            pa.BufferReader(b"\n".join(lines)),
            parse_options=pj.ParseOptions(explicit_schema=_JSON_LINE_SCHEMA, unexpected_field_behavior="infer"),
        )
        return set(table.column_names) == {"add", "remove"} and table.num_rows == len(lines)
    except pa.ArrowInvalid:
        return False


def _struct_to_map(arr: pa.Array | pa.ChunkedArray | None, n: int, keep_nulls: bool) -> pa.Array:
    """A struct array with free keys (as pyarrow infers JSON objects) as a map<string,string> array."""
    if arr is None:
        return pa.nulls(n, STRING_MAP)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_struct(arr.type):
        return pa.nulls(n, STRING_MAP)
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    row_valid = to_numpy(arr.is_valid())
    k = len(names)
    if k == 0:
        offsets = np.zeros(n + 1, dtype=np.int32)
        empty = pa.nulls(0, pa.string())
        return pa.MapArray.from_arrays(from_numpy(offsets), empty, empty, mask=from_numpy(~row_valid))
    children = []
    for i in range(k):
        child = arr.field(i)
        if not pa.types.is_string(child.type):
            child = child.cast(pa.string()) if not pa.types.is_null(child.type) else pa.nulls(n, pa.string())
        children.append(child)
    # Row-major interleaving: entry j of row i is child j at row i.
    values = pa.concat_arrays(children).take(
        from_numpy((np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel())
    )
    keys = strings(names).take(from_numpy(np.tile(np.arange(k, dtype=np.int64), n)))
    keep = np.repeat(row_valid, k)
    if not keep_nulls:
        keep &= to_numpy(values.is_valid())
    counts = keep.reshape(n, k).sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    mask = from_numpy(keep)
    return pa.MapArray.from_arrays(
        from_numpy(offsets), keys.filter(mask), values.filter(mask), mask=from_numpy(~row_valid)
    )


def _json_rows_to_file_actions(parsed: pa.Table, version_col: pa.Array) -> pa.Table:
    n = parsed.num_rows
    none = pa.nulls(n, pa.struct([]))
    add = parsed.column("add").combine_chunks() if "add" in parsed.column_names else none
    remove = parsed.column("remove").combine_chunks() if "remove" in parsed.column_names else none
    is_add = add.is_valid()
    is_add_np = to_numpy(is_add)
    columns: dict[str, pa.Array] = {"version": version_col, "is_add": is_add}
    for name in ACTION_COLUMNS:
        if name in _MAP_FIELDS:
            a = _struct_to_map(field_or_none(add, name), n, keep_nulls=name == "partitionValues")
            r = _struct_to_map(field_or_none(remove, name), n, keep_nulls=name == "partitionValues")
        else:
            typ = FILE_CHANGES_SCHEMA.field(name).type
            a = _as_type(field_or_none(add, name), typ, n)
            r = _as_type(field_or_none(remove, name), typ, n)
        columns[name] = _choose(is_add_np, a, r)
    return pa.table(columns, schema=FILE_CHANGES_SCHEMA)


def _as_type(arr: pa.Array | None, typ: pa.DataType, n: int) -> pa.Array:
    """A parsed (possibly inferred) field as its protocol type; raises ArrowInvalid when a value does not fit."""
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, typ)
    if arr.type == typ:
        return arr
    if typ == DV_TYPE:
        return normalize_dv(arr)
    return arr.cast(typ)


def _choose(is_add: np.ndarray, a: pa.Array, r: pa.Array) -> pa.Array:
    if is_add.all():
        return a
    if not is_add.any():
        return r
    # Stable interleave by index: take from the concatenation of both sides.
    n = len(is_add)
    idx = np.where(is_add, np.arange(n), np.arange(n) + n)
    return pa.concat_arrays([a, r]).take(from_numpy(idx))
