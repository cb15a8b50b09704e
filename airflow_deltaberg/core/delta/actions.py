"""Reading actions from commit files and checkpoints, columnar.

File actions (add/remove) become one Arrow table with a fixed schema (FILE_CHANGES_SCHEMA); the few other
actions (protocol, metaData, txn, domainMetadata, commitInfo, ...) are parsed as Python dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import from_numpy, strings, to_numpy
from airflow_deltaberg.core.delta.checkpoint_schema import checkpoint_type_problem
from airflow_deltaberg.core.delta.file_tables import (
    ACTION_COLUMNS,
    DV_TYPE,
    FILE_CHANGES_SCHEMA,
    STRING_MAP,
    empty_file_changes,
)
from airflow_deltaberg.core.delta.stats import conform
from airflow_deltaberg.core.delta.utf8 import arrow_utf8_problem, ndjson_utf8_problem
from airflow_deltaberg.core.errors import CorruptLogError, MissingCheckpointPartError, StatsParseError
from airflow_deltaberg.core.read_ahead import map_ahead, read_ahead
from airflow_deltaberg.core.storage import FileEntry, Storage

# What pyarrow is told about add/remove lines when every field is typed (the strict parse); partitionValues
# and tags have free keys, so they are inferred (as structs) and turned into maps afterwards.
_JSON_FILE_ACTION = pa.struct(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
        ("deletionTimestamp", pa.int64()),
    ]
)
_JSON_LINE_SCHEMA = pa.schema([("add", _JSON_FILE_ACTION), ("remove", _JSON_FILE_ACTION)])
# The fields that (nearly) every add line has: the fast parse types only these and infers the others.
# Naming absent optional fields (deletion vector, row tracking, ...) in the schema makes the reader null-fill
# each of them row by row, which doubled the parse time of a 300k-add commit without stats.
_COMMON_FIELDS = ("path", "size", "modificationTime", "dataChange", "stats")
_MAP_FIELDS = ("partitionValues", "tags")
_FILE_KINDS = ("add", "remove")
_TAGS = b'"tags"'  # a key (in stats strings quotes are escaped); may be followed by blanks
_MIN_BLOCK_SIZE = 1 << 20  # small blocks keep both reader threads busy on one big commit
_GROUP_BYTES = 8 << 20  # small commits are parsed together up to about this size


def _line_schema(partition_columns: Sequence[str] | None,
                 maps: dict[tuple[str, str], list[str]] | None = None) -> pa.Schema:
    """The add/remove schema, with partitionValues typed when the partition columns are known, and the
    free-key objects of ``maps`` ((kind, field) -> keys) typed as string values."""
    if partition_columns is None and not maps:
        return _JSON_LINE_SCHEMA
    return _typed_schema(_FILE_KINDS, list(_JSON_FILE_ACTION), partition_columns, maps or {})


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


def partition_columns_of(other: Sequence[tuple[int, str, dict[str, Any]]]) -> list[str] | None:
    """Physical partition column names of every metaData action among ``other`` (None if there is none)."""
    from airflow_deltaberg.core.delta.models import Metadata

    names: list[str] | None = None
    for _, name, body in other:
        if name == "metaData":
            try:
                columns = Metadata.from_action(body).physical_partition_columns
            except (KeyError, ValueError, TypeError):
                # Unknown columns: the reader infers them. Only the metaData in force must be valid (replay
                # checks it); an earlier one may be incomplete (Delta Live Tables writes one without schema).
                return None
            names = names or []
            names.extend(c for c in columns if c not in names)
    return names


def check_one_protocol_and_metadata(
    other: Iterable[tuple[int, str, dict[str, Any]]], table: str, file_of: Callable[[int], str]
) -> None:
    """Refuse a version (commit or checkpoint) with more than one protocol or metaData action: the protocol
    allows at most one of each, and which one would be in force is undefined. ``file_of(version)`` names the
    file for the message."""
    seen: set[tuple[int, str]] = set()
    for version, name, _ in other:
        if name == "protocol" or name == "metaData":
            if (version, name) in seen:
                raise CorruptLogError(f"two {name} actions in one version; the protocol allows at most one",
                                      table=table, version=version, file=file_of(version))
            seen.add((version, name))


@dataclass
class ActionBatch:
    """Actions read from a sequence of log files."""

    file_actions: pa.Table
    # (version, action name, action body) for every non-file action, in log order.
    other_actions: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


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
    return result


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


_DV_REQUIRED = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")


def missing_required_field(files: pa.Table) -> tuple[int, str] | None:
    """The first row of a FILE_CHANGES_SCHEMA table whose action lacks a field the protocol requires (an
    add: path, size, partitionValues; a remove: path; a deletion vector: all but offset), with that field's
    name; None when none does. Costs nothing when no value is null (the null counts are known)."""
    is_add = files.column("is_add")
    found = []

    def first(mask: pa.ChunkedArray, name: str) -> None:
        row = pc.index(mask, True).as_py()
        if row >= 0:
            found.append((row, name))

    path = files.column("path")
    if path.null_count:
        first(path.is_null(), "path")
    for name in ("size", "partitionValues"):
        column = files.column(name)
        if column.null_count:
            first(pc.and_(is_add, column.is_null()), name)
    dv = files.column("deletionVector")
    if dv.null_count < len(dv):
        for name in _DV_REQUIRED:
            first(pc.and_(dv.is_valid(), pc.struct_field(dv, name).is_null()), f"deletionVector.{name}")
    return min(found) if found else None


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
            f"line {line_no} does not follow the protocol's schema for add/remove actions: {_one_line(exc)}",
            table=table, version=version, file=storage.uri(entry.key),
        ) from exc
    raise CorruptLogError(f"file actions do not follow the protocol's schema: {_one_line(exc)}",
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
_A = {"add": "an add", "remove": "a remove"}


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
    if kind not in _A:
        return f"holds a {kind!r} action where an add or remove action was expected"
    if not isinstance(body, dict):
        return f"holds {_A[kind]} action that is not an object"
    for name in _REQUIRED[kind]:
        if body.get(name) is None:
            return f"holds {_A[kind]} action without {name}"
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
        for name in _DV_REQUIRED:
            if dv.get(name) is None:
                return f"holds {_A[kind]} action whose deletionVector lacks {name}"
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
            a = _struct_to_map(_field_or_none(add, name), n, keep_nulls=name == "partitionValues")
            r = _struct_to_map(_field_or_none(remove, name), n, keep_nulls=name == "partitionValues")
        else:
            typ = FILE_CHANGES_SCHEMA.field(name).type
            a = _as_type(_field_or_none(add, name), typ, n)
            r = _as_type(_field_or_none(remove, name), typ, n)
        columns[name] = _choose(is_add_np, a, r)
    return pa.table(columns, schema=FILE_CHANGES_SCHEMA)


def _as_type(arr: pa.Array | None, typ: pa.DataType, n: int) -> pa.Array:
    """A parsed (possibly inferred) field as its protocol type; raises ArrowInvalid when a value does not fit."""
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, typ)
    if arr.type == typ:
        return arr
    if typ == DV_TYPE:
        return _normalize_dv(arr)
    return arr.cast(typ)


def _field_or_none(struct: pa.StructArray, name: str) -> pa.Array | None:
    idx = struct.type.get_field_index(name)
    if idx < 0:
        return None
    # .field() ignores the struct's own validity, which is what we want: the row choice comes from is_add.
    return struct.field(idx)


def _choose(is_add: np.ndarray, a: pa.Array, r: pa.Array) -> pa.Array:
    if is_add.all():
        return a
    if not is_add.any():
        return r
    # Stable interleave by index: take from the concatenation of both sides.
    n = len(is_add)
    idx = np.where(is_add, np.arange(n), np.arange(n) + n)
    return pa.concat_arrays([a, r]).take(from_numpy(idx))


_OTHER_KINDS = ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata", "sidecar")
CHECKPOINT_BATCH_ROWS = 131_072
# Rows of JSON stats parsed at once: their strings (about 1.4 KB each for 20 columns) are held two or three
# times over while parsed. With the next batch read ahead, 16k rows parse 1M files' stats faster than 8k or 32k.
_JSON_STATS_BATCH_ROWS = 16_384


# A field every action of the kind has: where its column holds no value, the row group holds no such action.
_KEY_FIELDS = {"add": "path", "remove": "path", "metaData": "id", "protocol": "minReaderVersion", "txn": "appId",
               "domainMetadata": "domain", "checkpointMetadata": "version", "sidecar": "path"}


def _groups_holding(pf: pq.ParquetFile, kind: str) -> list[int]:
    """Row groups that may hold a ``kind`` action, from the column chunk statistics (all when unknown).
    A checkpoint of millions of adds has its few other actions in one row group: reading only that one
    saves decoding millions of null metaData, protocol and remove rows."""
    metadata = pf.metadata
    leaf = f"{kind}.{_KEY_FIELDS[kind]}"
    index = next((i for i in range(metadata.num_columns) if metadata.schema.column(i).path == leaf), None)
    groups = []
    for g in range(metadata.num_row_groups):
        chunk = metadata.row_group(g).column(index) if index is not None else None
        stats = chunk.statistics if chunk is not None else None
        if stats is None or not stats.has_null_count or stats.null_count < chunk.num_values:
            groups.append(g)
    return groups


def _projection(pf: pq.ParquetFile, with_stats: bool, kinds: Sequence[str] = _FILE_KINDS) -> list[str]:
    """The add/remove fields kept in FILE_CHANGES_SCHEMA (e.g. not partitionValues_parsed). Stats only if
    asked: they are the bulk of a checkpoint (often >90% of its bytes), read on demand by
    iter_checkpoint_stats."""
    wanted = set(ACTION_COLUMNS) | {"stats_parsed"} if with_stats else set(ACTION_COLUMNS) - {"stats"}
    columns = []
    for kind in kinds:
        if kind not in pf.schema_arrow.names:
            continue
        struct = pf.schema_arrow.field(kind).type
        columns.extend(f"{kind}.{f.name}" for f in struct if f.name in wanted)
    return columns


def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (pyarrow's Parquet and JSON errors end with, or hold, newlines)."""
    return " ".join(str(exc).split())


def _open_part(storage: Storage, table: str, version: int, entry: FileEntry, sidecar: bool) -> pq.ParquetFile:
    fs, path = storage.arrow_path(entry.key)
    try:
        pf = pq.ParquetFile(path, filesystem=fs)
        schema = pf.schema_arrow
    except FileNotFoundError as exc:
        kind = "sidecar" if sidecar else "checkpoint part"
        raise MissingCheckpointPartError(f"the {kind} is missing", table=table, version=version,
                                         file=storage.uri(entry.key)) from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {_one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    problem = checkpoint_type_problem(schema)
    if problem is not None:
        raise CorruptLogError(f"the checkpoint's {problem}", table=table, version=version,
                              file=storage.uri(entry.key))
    return pf


def read_parquet_checkpoint_part(
    storage: Storage, table: str, version: int, entry: FileEntry, *, sidecar: bool = False,
    with_stats: bool = False,
) -> ActionBatch:
    """Actions of one Parquet checkpoint part, V2 checkpoint or sidecar file (stats only if asked).

    File actions are read in batches and kept as chunks: a checkpoint of millions of files never needs
    one contiguous array (string arrays overflow past 2 GB) nor a full-size copy to drop null rows.
    """
    pf = _open_part(storage, table, version, entry, sidecar)
    try:
        groups = {kind: _groups_holding(pf, kind) for kind in (*_FILE_KINDS, *_OTHER_KINDS)
                  if kind in pf.schema_arrow.names}
        other_columns = [c for c in _OTHER_KINDS if groups.get(c)]
        other_groups = sorted({g for c in other_columns for g in groups[c]})
        other = []
        if other_columns:
            other_data = pf.read_row_groups(other_groups, columns=other_columns)
            _refuse_bad_strings(other_data, table, version, storage.uri(entry.key))
            other = _other_actions(other_data, version)
        file_kinds = [k for k in _FILE_KINDS if groups.get(k)]
        file_columns = _projection(pf, with_stats, file_kinds)
        file_groups = sorted({g for k in file_kinds for g in groups[k]})
        pieces = []
        if file_columns:
            for batch in _sliced_batches(storage, entry, pf, file_groups, file_columns):
                _refuse_bad_strings(batch, table, version, storage.uri(entry.key))
                pieces.extend(_batch_file_actions(batch, version))
        for piece in pieces:
            missing = missing_required_field(piece)
            if missing is not None:
                row, name = missing
                kind = "add" if piece.column("is_add")[row].as_py() else "remove"
                path = piece.column("path")[row].as_py()
                raise CorruptLogError(f"{_A[kind]} action{'' if path is None else f' of {path}'} has no {name}",
                                      table=table, version=version, file=storage.uri(entry.key))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {_one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    return ActionBatch(_concat_file_actions(pieces), other)


def _refuse_bad_strings(data: pa.Table | pa.RecordBatch, table: str, version: int, file: str) -> None:
    """Raise CorruptLogError when data read from a Parquet log file holds strings that are not UTF-8 (a Parquet
    reader does not check them)."""
    problem = arrow_utf8_problem(data)
    if problem is not None:
        raise CorruptLogError(f"the checkpoint {problem}", table=table, version=version, file=file)


class _StringsNotUtf8(Exception):
    """Raised in a stats worker for a batch whose strings are not UTF-8 (turned into CorruptLogError)."""


def iter_checkpoint_stats(
    storage: Storage,
    table: str,
    version: int,
    entry: FileEntry,
    target: pa.StructType,
    parse_json: Callable[[pa.Array], pa.Array],
    *,
    sidecar: bool = False,
) -> Iterator[pa.Array]:
    """The stats of the add actions of one Parquet checkpoint part as ``target`` (a stats_type), chunk by
    chunk, in the order read_parquet_checkpoint_part returns those adds.

    ``add.stats_parsed`` (written under delta.checkpoint.writeStatsAsStruct) is read when the part has it,
    and only its fields that ``target`` has; the JSON ``add.stats`` is read and given to ``parse_json`` only
    where the struct is missing. One chunk at a time is in memory, never the whole part's JSON.
    """
    pf = _open_part(storage, table, version, entry, sidecar)
    if "add" not in pf.schema_arrow.names:
        return
    add_type = pf.schema_arrow.field("add").type
    has_json = add_type.get_field_index("stats") >= 0
    struct_columns = _stats_parsed_columns(add_type, target)
    try:
        # Runs of row groups that need the same columns, each read in one go (a reader per row group
        # costs more than the reading on a checkpoint of many small row groups).
        runs: list[tuple[bool, list[int]]] = []
        for group in _groups_holding(pf, "add"):
            needs_json = has_json and not (struct_columns and _struct_stats_complete(pf, group))
            if runs and runs[-1][0] == needs_json:
                runs[-1][1].append(group)
            else:
                runs.append((needs_json, [group]))
        for needs_json, groups in runs:
            columns = ["add.path", *struct_columns, *(["add.stats"] if needs_json else [])]
            rows = _JSON_STATS_BATCH_ROWS if needs_json else CHECKPOINT_BATCH_ROWS
            # The next batch is read while two batches' stats are parsed: one parser call alone leaves a core
            # idle at its start and end.
            batches = read_ahead(_sliced_batches(storage, entry, pf, groups, columns, rows))
            yield from map_ahead(lambda batch: _batch_stats(batch, target, parse_json), batches)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {_one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    except StatsParseError as exc:
        raise CorruptLogError(exc.describe(), table=table, version=version, file=storage.uri(entry.key)) from exc
    except _StringsNotUtf8 as exc:
        raise CorruptLogError(f"the checkpoint {exc}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc


def _sliced_batches(
    storage: Storage, entry: FileEntry, pf: pq.ParquetFile, groups: list[int], columns: list[str],
    batch_rows: int = CHECKPOINT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Batches of ``columns`` from row groups ``groups``, through a fresh reader every few row groups.

    A reader holds on to buffers of every row group it has read until it is dropped (about the decoded
    size of the columns: 400 MB for the stats of 1M files), so one reader over a whole checkpoint would
    double the peak memory.
    """
    metadata = pf.metadata
    start = 0
    while start < len(groups):
        end, rows = start, 0
        while end < len(groups) and (end == start or rows + metadata.row_group(groups[end]).num_rows <= 2 * batch_rows):
            rows += metadata.row_group(groups[end]).num_rows
            end += 1
        fs, path = storage.arrow_path(entry.key)
        reader = pq.ParquetFile(path, filesystem=fs, metadata=metadata)
        yield from reader.iter_batches(batch_size=batch_rows, row_groups=groups[start:end],
                                       columns=columns, use_threads=True)
        del reader
        start = end


def _stats_parsed_columns(add_type: pa.StructType, target: pa.StructType) -> list[str]:
    """Parquet column paths of the ``add.stats_parsed`` fields that ``target`` wants."""
    idx = add_type.get_field_index("stats_parsed")
    if idx < 0 or not pa.types.is_struct(add_type.field(idx).type):
        return []
    found = add_type.field(idx).type
    out = []
    for f in found:
        name = STATS_STRUCT_ALIASES.get(f.name, f.name)
        if target.get_field_index(name) < 0:
            continue
        if pa.types.is_struct(f.type) and pa.types.is_struct(target.field(name).type) and f.type.num_fields:
            wanted = target.field(name).type
            picked = [c.name for c in f.type if wanted.get_field_index(c.name) >= 0]
            # No column wanted: one still tells whether the struct (e.g. minValues) is there, as the JSON does.
            out.extend(f"add.stats_parsed.{f.name}.{c}" for c in picked or [f.type.field(0).name])
        else:
            out.append(f"add.stats_parsed.{f.name}")
    return out


def _struct_stats_complete(pf: pq.ParquetFile, group: int) -> bool:
    """Whether every add of a row group has stats_parsed.numRecords (then its JSON stats are not needed),
    from the column chunk statistics; False when they are missing."""
    row_group = pf.metadata.row_group(group)
    nulls = {}
    for i in range(row_group.num_columns):
        column = row_group.column(i)
        if column.path_in_schema in ("add.path", "add.stats_parsed.numRecords"):
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                return False
            nulls[column.path_in_schema] = stats.null_count
    return len(nulls) == 2 and nulls["add.stats_parsed.numRecords"] == nulls["add.path"]


def _batch_stats(batch: pa.RecordBatch, target: pa.StructType, parse_json: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """The stats of the adds of a checkpoint batch (rows without an add left out)."""
    problem = arrow_utf8_problem(batch)
    if problem is not None:
        raise _StringsNotUtf8(problem)
    add = batch.column("add")
    if add.null_count == len(add):
        return pa.nulls(0, target)
    add = add.filter(add.is_valid()) if add.null_count else add
    try:
        return _add_stats(add, target, parse_json)
    except StatsParseError as exc:
        raise exc.of(add.field("path")[exc.row].as_py() if add.type.get_field_index("path") >= 0 else None) from exc


def _add_stats(add: pa.StructArray, target: pa.StructType, parse_json: Callable[[pa.Array], pa.Array]) -> pa.Array:
    n = len(add)
    struct = _field_or_none(add, "stats_parsed")
    parsed = conform_stats(struct, target) if struct is not None else None
    raw = _field_or_none(add, "stats")
    if raw is None or raw.null_count == n:
        return parsed if parsed is not None else pa.nulls(n, target)
    if parsed is None:
        return parse_json(raw)
    missing = pc.and_(parsed.is_null(), raw.is_valid())
    if not pc.any(missing).as_py():
        return parsed
    return pc.if_else(missing, parse_json(pc.if_else(missing, raw, pa.scalar(None, pa.string()))), parsed)


# The protocol's checkpoint schema example names the null counts of stats_parsed "nullCounts"; Delta (and
# the per-file stats JSON) call them "nullCount". Read both.
STATS_STRUCT_ALIASES = {"nullCounts": "nullCount"}


def conform_stats(struct: pa.Array, target: pa.StructType) -> pa.Array:
    """A checkpoint's ``stats_parsed`` as ``target``: fields matched by name, missing ones null."""
    if pa.types.is_struct(struct.type) and any(f.name in STATS_STRUCT_ALIASES for f in struct.type):
        names = [STATS_STRUCT_ALIASES.get(f.name, f.name) for f in struct.type]
        if len(set(names)) == len(names):
            struct = pa.StructArray.from_arrays([struct.field(i) for i in range(len(names))], names=names,
                                                mask=struct.is_null())
    return conform(struct, target)


def _batch_file_actions(batch: pa.RecordBatch | pa.Table, version: int) -> list[pa.Table]:
    pieces = []
    for kind in _FILE_KINDS:
        if kind not in batch.schema.names:
            continue
        col = batch.column(kind)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if col.null_count == len(col):
            continue
        if col.null_count:
            col = col.filter(col.is_valid())
        pieces.append(_checkpoint_struct_to_file_actions(col, version, kind == "add"))
    return pieces


def _concat_file_actions(pieces: list[pa.Table]) -> pa.Table:
    if not pieces:
        return empty_file_changes()
    with_stats = [p for p in pieces if "stats_parsed" in p.column_names]
    if with_stats and len(with_stats) != len(pieces):
        typ = with_stats[0].schema.field("stats_parsed").type
        pieces = [p if "stats_parsed" in p.column_names else p.append_column("stats_parsed", pa.nulls(p.num_rows, typ))
                  for p in pieces]
    return pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]


def _other_actions(data: pa.Table, version: int) -> list[tuple[int, str, dict[str, Any]]]:
    other: list[tuple[int, str, dict[str, Any]]] = []
    for kind in _OTHER_KINDS:
        if kind not in data.column_names:
            continue
        col = data.column(kind)
        col = col.filter(col.is_valid())
        for row in col.to_pylist():
            other.append((version, kind, _plain(row, col.type)))
    return other


def checkpoint_table_to_actions(data: pa.Table, version: int) -> ActionBatch:
    """Split a checkpoint's columns into file actions and other actions."""
    pieces = []
    for batch in data.to_batches(max_chunksize=CHECKPOINT_BATCH_ROWS):
        pieces.extend(_batch_file_actions(batch, version))
    return ActionBatch(_concat_file_actions(pieces), _other_actions(data, version))


def _plain(value: Any, typ: pa.DataType) -> Any:
    """A checkpoint value (from to_pylist) in the JSON form of the action: maps as dicts (empty ones too),
    structs without their null fields."""
    if value is None:
        return None
    if pa.types.is_struct(typ):
        return {f.name: _plain(value[f.name], f.type) for f in typ if value.get(f.name) is not None}
    if pa.types.is_map(typ):
        return {k: _plain(v, typ.item_type) for k, v in value}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return [_plain(v, typ.value_type) for v in value]
    return value


def _checkpoint_struct_to_file_actions(col: pa.StructArray, version: int, is_add: bool) -> pa.Table:
    n = len(col)
    columns: dict[str, pa.Array] = {
        "version": from_numpy(np.full(n, version, dtype=np.int64)),
        "is_add": from_numpy(np.full(n, is_add)),
    }
    for name in ACTION_COLUMNS:
        typ = FILE_CHANGES_SCHEMA.field(name).type
        child = _field_or_none(col, name)
        if child is None:
            columns[name] = pa.nulls(n, typ)
            continue
        if name == "deletionVector":
            child = _normalize_dv(child)
        columns[name] = child if child.type == typ else child.cast(typ)
    table = pa.table(columns, schema=FILE_CHANGES_SCHEMA)
    parsed = _field_or_none(col, "stats_parsed")
    if parsed is not None:
        table = table.append_column("stats_parsed", parsed)
    return table


def _normalize_dv(dv: pa.StructArray) -> pa.Array:
    children = []
    for f in DV_TYPE:
        c = _field_or_none(dv, f.name)
        children.append(pa.nulls(len(dv), f.type) if c is None else c.cast(f.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=dv.is_null())
