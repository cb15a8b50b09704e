"""Reading actions from commit files, log compactions and checkpoints, columnar.

File actions (add/remove) become one Arrow table with a fixed schema (FILE_ACTIONS_SCHEMA); the few other
actions (protocol, metaData, txn, domainMetadata, commitInfo, ...) are parsed as Python dicts.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from airflow_deltaberg.core.errors import CorruptLogError, MissingCheckpointPartError
from airflow_deltaberg.core.storage import FileEntry, Storage

DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
STRING_MAP = pa.map_(pa.string(), pa.string())

# One row per add or remove action, in log order. ``version`` is the commit (or checkpoint) version.
FILE_ACTIONS_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("is_add", pa.bool_()),
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
        ("deletionTimestamp", pa.int64()),
    ]
)
_ACTION_COLUMNS = [f.name for f in FILE_ACTIONS_SCHEMA][2:]

# What pyarrow is told about add/remove lines; partitionValues and tags have free keys, so they are
# inferred (as structs) and turned into maps afterwards.
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
_BLOCK_SIZE = 16 << 20


@dataclass
class ActionBatch:
    """Actions read from a sequence of log files."""

    file_actions: pa.Table
    # (version, action name, action body) for every non-file action, in log order.
    other_actions: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


def _empty_file_actions() -> pa.Table:
    return FILE_ACTIONS_SCHEMA.empty_table()


def _is_file_action_line(line: bytes) -> bool:
    head = line[:16].replace(b" ", b"")
    return head.startswith(b'{"add"') or head.startswith(b'{"remove"')


def read_json_actions(
    storage: Storage, table: str, files: Sequence[tuple[int, FileEntry]], *, checkpoint: bool = False
) -> ActionBatch:
    """Actions of NDJSON log files (commits, compactions, JSON checkpoints), in order."""
    file_lines: list[bytes] = []
    versions: list[int] = []
    counts: list[int] = []
    other: list[tuple[int, str, dict[str, Any]]] = []
    sources: list[tuple[int, FileEntry, int]] = []  # (version, file, first row) to locate bad rows
    for version, entry in files:
        try:
            data = storage.read(entry.key)
        except FileNotFoundError as exc:
            raise CorruptLogError("a listed log file has disappeared", table=table, version=version,
                                  file=storage.uri(entry.key)) from exc
        if data and not data.endswith(b"\n") and not _is_complete_json(data.rsplit(b"\n", 1)[-1]):
            line_no = data.count(b"\n") + 1
            raise CorruptLogError(
                f"line {line_no} is truncated (the file ends inside a JSON object)",
                table=table, version=version, file=storage.uri(entry.key),
            )
        sources.append((version, entry, len(file_lines)))
        n = 0
        for line_no, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            if _is_file_action_line(line):
                file_lines.append(line)
                n += 1
                continue
            try:
                action = json.loads(line)
                (name, body), = action.items()
            except (ValueError, AttributeError) as exc:
                raise CorruptLogError(
                    f"line {line_no} is not a valid action: {str(exc)[:120]}",
                    table=table, version=version, file=storage.uri(entry.key),
                ) from exc
            if not isinstance(body, dict):
                raise CorruptLogError(
                    f"line {line_no}: the {name!r} action is not an object",
                    table=table, version=version, file=storage.uri(entry.key),
                )
            other.append((version, name, body))
        versions.append(version)
        counts.append(n)
    if not file_lines:
        return ActionBatch(_empty_file_actions(), other)
    try:
        parsed = pj.read_json(
            io.BytesIO(b"\n".join(file_lines)),
            read_options=pj.ReadOptions(block_size=_BLOCK_SIZE),
            parse_options=pj.ParseOptions(explicit_schema=_JSON_LINE_SCHEMA, unexpected_field_behavior="infer"),
        )
    except pa.ArrowInvalid as exc:
        _raise_bad_file_line(storage, table, files, exc)
    version_col = pa.array(np.repeat(np.asarray(versions, dtype=np.int64), counts))
    return ActionBatch(_json_rows_to_file_actions(parsed, version_col), other)


def _is_complete_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _raise_bad_file_line(storage: Storage, table: str, files: Sequence[tuple[int, FileEntry]], exc: Exception):
    for version, entry in files:
        for line_no, line in enumerate(storage.read(entry.key).split(b"\n"), start=1):
            if line.strip() and _is_file_action_line(line):
                try:
                    json.loads(line)
                except ValueError as bad:
                    raise CorruptLogError(
                        f"line {line_no} is not valid JSON: {bad}", table=table, version=version,
                        file=storage.uri(entry.key),
                    ) from exc
    raise CorruptLogError(f"file actions do not follow the protocol's schema: {exc}",
                          table=table, version=files[-1][0] if files else None) from exc


def _struct_to_map(arr: pa.Array | pa.ChunkedArray | None, n: int, keep_nulls: bool) -> pa.Array:
    """A struct array with free keys (as pyarrow infers JSON objects) as a map<string,string> array."""
    if arr is None:
        return pa.nulls(n, STRING_MAP)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_struct(arr.type):
        return pa.nulls(n, STRING_MAP)
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    row_valid = np.asarray(arr.is_valid())
    k = len(names)
    if k == 0:
        offsets = np.zeros(n + 1, dtype=np.int32)
        return pa.MapArray.from_arrays(pa.array(offsets), pa.array([], pa.string()), pa.array([], pa.string()),
                                       mask=pa.array(~row_valid))
    children = []
    for i in range(k):
        child = arr.field(i)
        if not pa.types.is_string(child.type):
            child = child.cast(pa.string()) if not pa.types.is_null(child.type) else pa.nulls(n, pa.string())
        children.append(child)
    # Row-major interleaving: entry j of row i is child j at row i.
    values = pa.concat_arrays(children).take(
        pa.array((np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel())
    )
    keys = pa.array(np.tile(np.asarray(names, dtype=object), n), pa.string())
    keep = np.repeat(row_valid, k)
    if not keep_nulls:
        keep &= np.asarray(values.is_valid())
    counts = keep.reshape(n, k).sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    mask = pa.array(keep)
    return pa.MapArray.from_arrays(
        pa.array(offsets), keys.filter(mask), values.filter(mask), mask=pa.array(~row_valid)
    )


def _json_rows_to_file_actions(parsed: pa.Table, version_col: pa.Array) -> pa.Table:
    add = parsed.column("add").combine_chunks()
    remove = parsed.column("remove").combine_chunks()
    is_add = add.is_valid()
    n = len(add)
    is_add_np = np.asarray(is_add)
    columns: dict[str, pa.Array] = {"version": version_col, "is_add": is_add}
    for name in _ACTION_COLUMNS:
        if name in ("partitionValues", "tags"):
            a = _struct_to_map(_field_or_none(add, name), n, keep_nulls=name == "partitionValues")
            r = _struct_to_map(_field_or_none(remove, name), n, keep_nulls=name == "partitionValues")
        else:
            typ = FILE_ACTIONS_SCHEMA.field(name).type
            a = _field_or_none(add, name)
            r = _field_or_none(remove, name)
            a = a if a is not None else pa.nulls(n, typ)
            r = r if r is not None else pa.nulls(n, typ)
        columns[name] = _choose(is_add_np, a, r)
    return pa.table(columns, schema=FILE_ACTIONS_SCHEMA)


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
    return pa.concat_arrays([a, r]).take(pa.array(idx))


def read_parquet_checkpoint_part(
    storage: Storage, table: str, version: int, entry: FileEntry, *, sidecar: bool = False
) -> ActionBatch:
    """Actions of one Parquet checkpoint part, V2 checkpoint or sidecar file."""
    fs, path = storage.arrow_path(entry.key)
    try:
        pf = pq.ParquetFile(path, filesystem=fs)
        available = set(pf.schema_arrow.names)
        wanted = [c for c in ("add", "remove", "metaData", "protocol", "txn", "domainMetadata",
                              "checkpointMetadata", "sidecar") if c in available]
        data = pf.read(columns=wanted)
    except FileNotFoundError as exc:
        kind = "sidecar" if sidecar else "checkpoint part"
        raise MissingCheckpointPartError(f"the {kind} is missing", table=table, version=version,
                                         file=storage.uri(entry.key)) from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {exc}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    return checkpoint_table_to_actions(data, version)


def checkpoint_table_to_actions(data: pa.Table, version: int) -> ActionBatch:
    """Split a checkpoint's columns into file actions and other actions."""
    pieces = []
    for kind in ("add", "remove"):
        if kind not in data.column_names:
            continue
        col = data.column(kind).combine_chunks()
        valid = col.is_valid()
        if not pc.any(valid).as_py():
            continue
        col = col.filter(valid)
        pieces.append(_checkpoint_struct_to_file_actions(col, version, kind == "add"))
    other: list[tuple[int, str, dict[str, Any]]] = []
    for kind in ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata", "sidecar"):
        if kind not in data.column_names:
            continue
        col = data.column(kind)
        col = col.filter(col.is_valid())
        for row in col.to_pylist():
            other.append((version, kind, _plain(row)))
    file_actions = pa.concat_tables(pieces) if pieces else _empty_file_actions()
    return ActionBatch(file_actions, other)


def _plain(value: Any) -> Any:
    """Checkpoint rows as the JSON form of the action: maps as dicts, no null fields."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {k: v for k, v in value}
        return [_plain(x) for x in value]
    return value


def _checkpoint_struct_to_file_actions(col: pa.StructArray, version: int, is_add: bool) -> pa.Table:
    n = len(col)
    columns: dict[str, pa.Array] = {
        "version": pa.array(np.full(n, version, dtype=np.int64)),
        "is_add": pa.array(np.full(n, is_add)),
    }
    for name in _ACTION_COLUMNS:
        typ = FILE_ACTIONS_SCHEMA.field(name).type
        child = _field_or_none(col, name)
        if child is None:
            columns[name] = pa.nulls(n, typ)
            continue
        if name == "deletionVector":
            child = _normalize_dv(child)
        columns[name] = child if child.type == typ else child.cast(typ)
    table = pa.table(columns, schema=FILE_ACTIONS_SCHEMA)
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
