"""Reading actions from commit files, log compactions and checkpoints, columnar.

File actions (add/remove) become one Arrow table with a fixed schema (FILE_ACTIONS_SCHEMA); the few other
actions (protocol, metaData, txn, domainMetadata, commitInfo, ...) are parsed as Python dicts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import from_numpy, strings, to_numpy
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
_TAGS = b'"tags":{"'


def _line_schema(partition_columns: Sequence[str] | None) -> pa.Schema:
    """The add/remove schema, with partitionValues typed when the partition columns are known."""
    if partition_columns is None:
        return _JSON_LINE_SCHEMA
    values = pa.struct([(name, pa.string()) for name in partition_columns])
    action = pa.struct([*_JSON_FILE_ACTION, ("partitionValues", values)])
    return pa.schema([("add", action), ("remove", action)])


def partition_columns_of(other: Sequence[tuple[int, str, dict[str, Any]]]) -> list[str] | None:
    """Physical partition column names of every metaData action among ``other`` (None if there is none)."""
    from airflow_deltaberg.core.delta.models import Metadata

    names: list[str] | None = None
    for _, name, body in other:
        if name == "metaData":
            try:
                columns = Metadata.from_action(body).physical_partition_columns
            except (KeyError, ValueError, TypeError):
                return None  # replay reports the broken metaData action with its file
            names = names or []
            names.extend(c for c in columns if c not in names)
    return names
_BLOCK_SIZE = 8 << 20


@dataclass
class ActionBatch:
    """Actions read from a sequence of log files."""

    file_actions: pa.Table
    # (version, action name, action body) for every non-file action, in log order.
    other_actions: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


def _empty_file_actions() -> pa.Table:
    # Schema.empty_table() goes through pandas; build the zero-length columns directly.
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in FILE_ACTIONS_SCHEMA], schema=FILE_ACTIONS_SCHEMA)


_ADD = np.frombuffer(b'{"add"', np.uint8)
_REMOVE = np.frombuffer(b'{"remove"', np.uint8)


def _matches(arr: np.ndarray, starts: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    out = np.ones(len(starts), dtype=bool)
    for i, byte in enumerate(prefix):
        out &= arr[starts + i] == byte
    return out


def split_lines(data: bytes) -> tuple[bytes, int, list[tuple[int, bytes]]]:
    """Separate add/remove lines from the other actions of one NDJSON log file.

    Returns the add/remove lines as one payload, their count, and the other lines with their line
    numbers. Works on line starts with numpy, so a 300k-line commit costs no Python loop per line.
    """
    if not data.strip():
        return b"", 0, []
    arr = np.frombuffer(data, np.uint8)
    newlines = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    # Lines shorter than '{"remove"' cannot be file actions; give them to the careful path below.
    long_enough = ends - starts >= len(_REMOVE)
    safe_starts = np.where(long_enough, starts, 0)
    is_file = long_enough & (_matches(arr, safe_starts, _ADD) | _matches(arr, safe_starts, _REMOVE))
    other_rows = np.flatnonzero(~is_file)
    other: list[tuple[int, bytes]] = []
    pieces: list[bytes] = []
    cursor = 0
    for row in other_rows.tolist():
        line = data[starts[row] : ends[row]]
        pieces.append(data[cursor : starts[row]])
        cursor = ends[row] + 1
        if line.strip():
            other.append((row + 1, line))
    if not other_rows.size:
        payload = data
    else:
        pieces.append(data[cursor:])
        payload = b"".join(pieces)
    return payload, int(is_file.sum()), other


def read_json_actions(
    storage: Storage,
    table: str,
    files: Sequence[tuple[int, FileEntry]],
    *,
    partition_columns: Sequence[str] | None = None,
) -> ActionBatch:
    """Actions of NDJSON log files (commits, compactions, JSON checkpoints), in order.

    ``partition_columns`` (physical names) lets the reader type partitionValues instead of inferring
    them; metaData actions inside ``files`` add to it.
    """
    chunks: list[bytes] = []
    versions: list[int] = []
    counts: list[int] = []
    other: list[tuple[int, str, dict[str, Any]]] = []
    for version, entry in files:
        try:
            data = storage.read(entry.key)
        except FileNotFoundError as exc:
            raise CorruptLogError("a listed log file has disappeared", table=table, version=version,
                                  file=storage.uri(entry.key)) from exc
        if data and not data.endswith(b"\n"):
            if not _is_complete_json(data.rsplit(b"\n", 1)[-1]):
                last_line = data.count(b"\n") + 1
                raise CorruptLogError(
                    f"line {last_line} is truncated (the file ends inside a JSON object)",
                    table=table, version=version, file=storage.uri(entry.key),
                )
            data += b"\n"
        payload, n_file_lines, other_lines = split_lines(data)
        for line_no, line in other_lines:
            other.append((version, *_parse_other_action(line, line_no, storage, table, version, entry)))
        if n_file_lines:
            chunks.append(payload)
            versions.append(version)
            counts.append(n_file_lines)
    found = partition_columns_of(other)
    if found is not None or partition_columns is not None:
        partition_columns = list(dict.fromkeys([*(partition_columns or []), *(found or [])]))
    # Parse in groups of about _BLOCK_SIZE: small commits are joined (one reader call for many), big
    # ones are parsed on their own (no copy).
    tables = []
    group: list[int] = []
    group_bytes = 0
    for i, chunk in enumerate(chunks):
        group.append(i)
        group_bytes += len(chunk)
        if group_bytes >= _BLOCK_SIZE or i == len(chunks) - 1:
            tables.append(_parse_file_lines(storage, table, files, [chunks[j] for j in group],
                                            [versions[j] for j in group], [counts[j] for j in group],
                                            partition_columns))
            group, group_bytes = [], 0
    if not tables:
        return ActionBatch(_empty_file_actions(), other)
    return ActionBatch(pa.concat_tables(tables) if len(tables) > 1 else tables[0], other)


def _parse_file_lines(
    storage: Storage,
    table: str,
    files: Sequence[tuple[int, FileEntry]],
    chunks: list[bytes],
    versions: list[int],
    counts: list[int],
    partition_columns: Sequence[str] | None,
) -> pa.Table:
    payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    # Typed partitionValues and no tags: nothing to infer, which halves the parse time. Tags have free
    # keys, so their presence switches to inference (other actions are already split off, so only
    # add/remove objects are inferred).
    # partitionValues stay typed (strings) even when tags force inference: inferred values that look like
    # dates would come back as timestamps.
    infer = partition_columns is None or _TAGS in payload
    try:
        parsed = pj.read_json(
            pa.BufferReader(payload),
            read_options=pj.ReadOptions(block_size=_BLOCK_SIZE),
            parse_options=pj.ParseOptions(
                explicit_schema=_line_schema(partition_columns),
                unexpected_field_behavior="infer" if infer else "ignore",
            ),
        )
    except pa.ArrowInvalid as exc:
        _raise_bad_line(storage, table, files, exc)
    if parsed.num_rows != sum(counts) or set(parsed.column_names) != {"add", "remove"}:
        _raise_bad_line(storage, table, files, ValueError("the add/remove lines do not parse one row each"))
    version_col = from_numpy(np.repeat(np.asarray(versions, dtype=np.int64), counts))
    return _json_rows_to_file_actions(parsed, version_col)


def _parse_other_action(
    line: bytes, line_no: int, storage: Storage, table: str, version: int, entry: FileEntry
) -> tuple[str, dict[str, Any]]:
    try:
        action = json.loads(line)
        ((name, body),) = action.items()
        if not isinstance(body, dict):
            raise ValueError(f"the {name!r} action is not an object")
    except (ValueError, AttributeError) as exc:
        raise CorruptLogError(f"line {line_no} is not a valid action: {str(exc)[:160]}",
                              table=table, version=version, file=storage.uri(entry.key)) from exc
    return name, body


def _is_complete_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _raise_bad_line(
    storage: Storage, table: str, files: Sequence[tuple[int, FileEntry]], exc: Exception
) -> NoReturn:
    """Name the file and line at fault once the columnar parse has failed (error path only)."""
    for version, entry in files:
        lines = [(no, line) for no, line in enumerate(storage.read(entry.key).split(b"\n"), start=1)
                 if line.strip() and _is_file_action_line(line)]
        for line_no, line in lines:
            try:
                if not isinstance(json.loads(line), dict):
                    raise ValueError("not a JSON object")
            except ValueError as bad:
                raise CorruptLogError(f"line {line_no} is not valid JSON: {bad}", table=table, version=version,
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
            f"line {line_no} does not follow the protocol's schema for add/remove actions: {exc}",
            table=table, version=version, file=storage.uri(entry.key),
        ) from exc
    raise CorruptLogError(f"file actions do not follow the protocol's schema: {exc}", table=table) from exc


def _is_file_action_line(line: bytes) -> bool:
    head = line.lstrip()[:12].replace(b" ", b"")
    return head.startswith(b'{"add"') or head.startswith(b'{"remove"')


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
    add = parsed.column("add").combine_chunks()
    remove = parsed.column("remove").combine_chunks()
    is_add = add.is_valid()
    n = len(add)
    is_add_np = to_numpy(is_add)
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
    return pa.concat_arrays([a, r]).take(from_numpy(idx))


_FILE_KINDS = ("add", "remove")
_OTHER_KINDS = ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata", "sidecar")
CHECKPOINT_BATCH_ROWS = 131_072


# Stats are the bulk of a checkpoint (often >90% of its bytes); they are read on demand, see
# read_checkpoint_stats.
_LAZY_FIELDS = ("stats", "stats_parsed")


def _projection(pf: pq.ParquetFile, with_stats: bool) -> list[str]:
    columns = []
    for kind in _FILE_KINDS:
        if kind not in pf.schema_arrow.names:
            continue
        struct = pf.schema_arrow.field(kind).type
        columns.extend(f"{kind}.{f.name}" for f in struct if with_stats or f.name not in _LAZY_FIELDS)
    return columns


def _open_part(storage: Storage, table: str, version: int, entry: FileEntry, sidecar: bool) -> pq.ParquetFile:
    fs, path = storage.arrow_path(entry.key)
    try:
        return pq.ParquetFile(path, filesystem=fs)
    except FileNotFoundError as exc:
        kind = "sidecar" if sidecar else "checkpoint part"
        raise MissingCheckpointPartError(f"the {kind} is missing", table=table, version=version,
                                         file=storage.uri(entry.key)) from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {exc}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc


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
        available = set(pf.schema_arrow.names)
        other_columns = [c for c in _OTHER_KINDS if c in available]
        other = _other_actions(pf.read(columns=other_columns), version) if other_columns else []
        file_columns = _projection(pf, with_stats)
        pieces = []
        if file_columns:
            for batch in pf.iter_batches(batch_size=CHECKPOINT_BATCH_ROWS, columns=file_columns,
                                         use_threads=True):
                pieces.extend(_batch_file_actions(batch, version))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {exc}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    return ActionBatch(_concat_file_actions(pieces), other)


def read_checkpoint_stats(
    storage: Storage, table: str, version: int, entry: FileEntry, *, sidecar: bool = False
) -> tuple[list[pa.Array], list[pa.Array] | None]:
    """The ``stats`` (and ``stats_parsed`` when present) of the add actions of one Parquet checkpoint
    part, in the order read_parquet_checkpoint_part returns those adds, as chunks."""
    pf = _open_part(storage, table, version, entry, sidecar)
    if "add" not in pf.schema_arrow.names:
        return [], None
    fields = {f.name for f in pf.schema_arrow.field("add").type}
    columns = ["add.path", *[f"add.{name}" for name in _LAZY_FIELDS if name in fields]]
    raw: list[pa.Array] = []
    parsed: list[pa.Array] | None = [] if "stats_parsed" in fields else None
    try:
        for batch in pf.iter_batches(batch_size=CHECKPOINT_BATCH_ROWS, columns=columns, use_threads=True):
            add = batch.column("add")
            if add.null_count == len(add):
                continue
            add = add.filter(add.is_valid()) if add.null_count else add
            stats = _field_or_none(add, "stats")
            raw.append(stats if stats is not None else pa.nulls(len(add), pa.string()))
            if parsed is not None:
                parsed.append(_field_or_none(add, "stats_parsed"))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {exc}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    return raw, parsed


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
        return _empty_file_actions()
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
            other.append((version, kind, _plain(row)))
    return other


def checkpoint_table_to_actions(data: pa.Table, version: int) -> ActionBatch:
    """Split a checkpoint's columns into file actions and other actions."""
    pieces = []
    for batch in data.to_batches(max_chunksize=CHECKPOINT_BATCH_ROWS):
        pieces.extend(_batch_file_actions(batch, version))
    return ActionBatch(_concat_file_actions(pieces), _other_actions(data, version))


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
        "version": from_numpy(np.full(n, version, dtype=np.int64)),
        "is_add": from_numpy(np.full(n, is_add)),
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
