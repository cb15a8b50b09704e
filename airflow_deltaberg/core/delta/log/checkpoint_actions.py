"""Reading the actions of Parquet checkpoint parts (classic, multi-part, V2 and sidecars), columnar, and their
adds' stats (``add.stats_parsed`` where the part has it, else the JSON ``add.stats``), a chunk at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import from_numpy
from airflow_deltaberg.core.delta.file_checks.file_tables import ACTION_COLUMNS, FILE_CHANGES_SCHEMA, empty_file_changes
from airflow_deltaberg.core.delta.file_checks.footer_check import footer_problem
from airflow_deltaberg.core.delta.log.actions import (
    ACTION_NOUNS,
    FILE_KINDS,
    ActionBatch,
    field_or_none,
    missing_required_field,
    normalize_dv,
    one_line,
)
from airflow_deltaberg.core.delta.log.checkpoint_schema import checkpoint_type_problem
from airflow_deltaberg.core.delta.log.utf8 import arrow_utf8_problem
from airflow_deltaberg.core.delta.stats.stats import STATS_STRUCT_ALIASES, conform_stats
from airflow_deltaberg.core.errors import CorruptLogError, MissingCheckpointPartError, StatsParseError
from airflow_deltaberg.core.read_ahead import map_ahead, read_ahead
from airflow_deltaberg.core.storage import FileEntry, Storage

#: What reading a damaged Parquet log file raises: a name in its footer that is not UTF-8 comes out of pyarrow as a
#: UnicodeDecodeError (fuzz seed 5 case 3110).
_UNREADABLE = (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, UnicodeDecodeError)
_OTHER_KINDS = ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata", "sidecar")
CHECKPOINT_BATCH_ROWS = 131_072
# Rows of JSON stats parsed at once: their strings (about 1.4 KB each for 20 columns) are held two or three
# times over while parsed. With the next batch read ahead, 16k rows parse 1M files' stats faster than 8k or 32k.
_JSON_STATS_BATCH_ROWS = 16_384
# Rows of typed stats (stats_parsed) read at once: about 1 KB each for 20 columns, decoded twice over by the reader,
# with a batch read ahead and two in the consumer's hands. 64k rows instead of 131k: a 1M-file full conversion
# peaks at 0.87 GB instead of 1.2 GB, in the same CPU time.
_STRUCT_STATS_BATCH_ROWS = 65_536


# A field every action of the kind has: where its column holds no value, the row group holds no such action.
_KEY_FIELDS = {"add": "path", "remove": "path", "metaData": "id", "protocol": "minReaderVersion", "txn": "appId",
               "domainMetadata": "domain", "checkpointMetadata": "version", "sidecar": "path"}


def _groups_holding(pf: pq.ParquetFile, kinds: Sequence[str], where: Mapping[str, Any]) -> dict[str, list[int]]:
    """Per action kind, the row groups that may hold such an action, from the column chunk statistics (all when
    unknown). A checkpoint of millions of adds has its few other actions in one row group: reading only that one
    saves decoding millions of null metaData, protocol and remove rows.

    The statistics are not taken on trust: the key column of every row group they call empty is read (a column of
    nulls decodes from its definition levels alone, ~1 ms per 50k rows), and one that holds a value raises
    CorruptLogError (``where``: table, version, file). Skipping it would drop its actions without a word."""
    metadata = pf.metadata
    leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    holding: dict[str, list[int]] = {}
    claimed_empty: dict[str, list[int]] = {}
    for kind in kinds:
        leaf = f"{kind}.{_KEY_FIELDS[kind]}"
        index = leaves.index(leaf) if leaf in leaves else None
        holding[kind], claimed_empty[kind] = [], []
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(index) if index is not None else None
            stats = chunk.statistics if chunk is not None else None
            if stats is None or not stats.has_null_count or stats.null_count < chunk.num_values:
                holding[kind].append(g)
            else:
                claimed_empty[kind].append(g)
    _check_claimed_empty(pf, claimed_empty, where)
    return holding


def _check_claimed_empty(pf: pq.ParquetFile, claimed_empty: Mapping[str, list[int]], where: Mapping[str, Any]) -> None:
    """Raise CorruptLogError when a row group whose statistics say a kind's key column holds only nulls holds a
    value in it."""
    by_groups: dict[tuple[int, ...], list[str]] = {}
    for kind, groups in claimed_empty.items():
        if groups:
            by_groups.setdefault(tuple(groups), []).append(kind)
    # Kinds claimed empty in the same row groups are read together; no column is read beyond its claimed groups
    # (the add paths of a big checkpoint are most of its bytes after the stats).
    for groups, kinds in by_groups.items():
        read = pf.read_row_groups(list(groups), columns=[f"{kind}.{_KEY_FIELDS[kind]}" for kind in kinds])
        starts = np.cumsum([0, *(pf.metadata.row_group(g).num_rows for g in groups)])
        for kind in kinds:
            keys = pc.struct_field(read.column(kind).combine_chunks(), [0])  # null under a null action too
            for i, g in enumerate(groups):
                rows = int(starts[i + 1] - starts[i])
                found = rows - keys.slice(int(starts[i]), rows).null_count
                if found:
                    raise CorruptLogError(
                        f"the checkpoint's footer says column {kind}.{_KEY_FIELDS[kind]} of row group {g} holds only "
                        f"nulls, but it holds {found} values: its statistics are wrong, and a reader trusting them "
                        "would skip those actions", **where)


def _projection(pf: pq.ParquetFile, with_stats: bool, kinds: Sequence[str] = FILE_KINDS) -> list[str]:
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


def _open_part(storage: Storage, table: str, version: int, entry: FileEntry, sidecar: bool) -> pq.ParquetFile:
    fs, path = storage.arrow_path(entry.key)
    try:
        pf = pq.ParquetFile(path, filesystem=fs)
        schema = pf.schema_arrow
    except FileNotFoundError as exc:
        kind = "sidecar" if sidecar else "checkpoint part"
        raise MissingCheckpointPartError(f"the {kind} is missing", table=table, version=version,
                                         file=storage.uri(entry.key)) from exc
    except _UNREADABLE as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    problem = checkpoint_type_problem(schema)
    if problem is not None:
        raise CorruptLogError(f"the checkpoint's {problem}", table=table, version=version,
                              file=storage.uri(entry.key))
    problem = _checked_footer_problem(storage.uri(entry.key), entry, pf.metadata)
    if problem is not None:
        raise CorruptLogError(f"the checkpoint file {problem}", table=table, version=version,
                              file=storage.uri(entry.key))
    return pf


#: Checkpoint parts whose footer ``footer_problem`` passed: a conversion opens a part several times.
_FOOTERS_CHECKED: dict[tuple[str, int, int], None] = {}
_FOOTERS_KEPT = 256


def _checked_footer_problem(uri: str, entry: FileEntry, metadata: pq.FileMetaData) -> str | None:
    key = (uri, entry.size, entry.mtime_ms)
    if key in _FOOTERS_CHECKED:
        return None
    problem = footer_problem(metadata)
    if problem is None:
        if len(_FOOTERS_CHECKED) >= _FOOTERS_KEPT:
            _FOOTERS_CHECKED.pop(next(iter(_FOOTERS_CHECKED)))
        _FOOTERS_CHECKED[key] = None
    return problem


def holds_struct_stats(storage: Storage, entry: FileEntry) -> bool:
    """Whether a Parquet checkpoint part's add actions carry ``stats_parsed`` (``writeStatsAsStruct``): their stats
    are then read without parsing JSON. False for a part whose schema cannot be read (its reader says why)."""
    fs, path = storage.arrow_path(entry.key)
    try:
        add = pq.read_schema(path, filesystem=fs).field("add").type
    except (KeyError, *_UNREADABLE):
        return False
    return pa.types.is_struct(add) and _struct_stats_type(add) is not None


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
        where = {"table": table, "version": version, "file": storage.uri(entry.key)}
        groups = _groups_holding(pf, [k for k in (*FILE_KINDS, *_OTHER_KINDS) if k in pf.schema_arrow.names], where)
        other_columns = [c for c in _OTHER_KINDS if groups.get(c)]
        other_groups = sorted({g for c in other_columns for g in groups[c]})
        other = []
        if other_columns:
            other_data = pf.read_row_groups(other_groups, columns=other_columns)
            _refuse_bad_strings(other_data, table, version, storage.uri(entry.key))
            other = _other_actions(other_data, version)
        file_kinds = [k for k in FILE_KINDS if groups.get(k)]
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
                of_path = "" if path is None else f" of {path}"
                raise CorruptLogError(f"{ACTION_NOUNS[kind]} action{of_path} has no {name}", table=table,
                                      version=version, file=storage.uri(entry.key))
    except _UNREADABLE as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    return ActionBatch(_concat_file_actions(pieces), other)


def _refuse_bad_strings(data: pa.Table | pa.RecordBatch, table: str, version: int, file: str) -> None:
    """Raise CorruptLogError when data read from a Parquet log file holds strings that are not UTF-8 (a Parquet
    reader does not check them)."""
    problem = arrow_utf8_problem(data)
    if problem is not None:
        raise CorruptLogError(f"the checkpoint {problem}", table=table, version=version, file=file)


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
    and only its fields that ``target`` has; the JSON ``add.stats`` is read and given to ``parse_json`` (which must
    refuse text that is not UTF-8: it is not checked before) only where the struct is missing. One chunk at a time
    is in memory, never the whole part's JSON.
    """
    pf = _open_part(storage, table, version, entry, sidecar)
    if "add" not in pf.schema_arrow.names:
        return
    add_type = pf.schema_arrow.field("add").type
    has_json = add_type.get_field_index("stats") >= 0
    struct_columns = _stats_parsed_columns(add_type, target)
    where = {"table": table, "version": version, "file": storage.uri(entry.key)}
    try:
        # Runs of row groups that need the same columns, each read in one go (a reader per row group
        # costs more than the reading on a checkpoint of many small row groups).
        runs: list[tuple[bool, list[int]]] = []
        for group in _groups_holding(pf, ["add"], where)["add"]:
            needs_json = has_json and not (struct_columns and _struct_stats_complete(pf, group))
            if runs and runs[-1][0] == needs_json:
                runs[-1][1].append(group)
            else:
                runs.append((needs_json, [group]))
        for needs_json, groups in runs:
            columns = ["add.path", *struct_columns, *(["add.stats"] if needs_json else [])]
            rows = _JSON_STATS_BATCH_ROWS if needs_json else _STRUCT_STATS_BATCH_ROWS
            # The next batch is read while two batches' stats are parsed: one parser call alone leaves a core
            # idle at its start and end.
            batches = read_ahead(_sliced_batches(storage, entry, pf, groups, columns, rows))
            yield from map_ahead(lambda batch: _batch_stats(batch, target, parse_json, where), batches)
    except _UNREADABLE as exc:
        raise CorruptLogError(f"the checkpoint file cannot be read: {one_line(exc)}", table=table, version=version,
                              file=storage.uri(entry.key)) from exc
    except StatsParseError as exc:
        raise CorruptLogError(exc.describe(), table=table, version=version, file=storage.uri(entry.key)) from exc


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


def _struct_stats_type(add_type: pa.StructType) -> pa.StructType | None:
    """The type of the adds' ``stats_parsed`` column when it is a struct (else the stats are JSON only)."""
    index = add_type.get_field_index("stats_parsed")
    found = add_type.field(index).type if index >= 0 else None
    return found if found is not None and pa.types.is_struct(found) else None


def _stats_parsed_columns(add_type: pa.StructType, target: pa.StructType) -> list[str]:
    """Parquet column paths of the ``add.stats_parsed`` fields that ``target`` wants."""
    found = _struct_stats_type(add_type)
    if found is None:
        return []
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


def _batch_stats(batch: pa.RecordBatch, target: pa.StructType, parse_json: Callable[[pa.Array], pa.Array],
                 where: Mapping[str, Any]) -> pa.Array:
    """The stats of the adds of a checkpoint batch (rows without an add left out); ``where`` names the part in a
    CorruptLogError for strings that are not UTF-8."""
    add = batch.column("add")
    # The JSON stats are checked where they are parsed (parse_json refuses text that is not UTF-8, naming the add).
    problem = arrow_utf8_problem(_without_field(add, "stats"))
    if problem is not None:
        raise CorruptLogError(f"the checkpoint {problem}", **where)
    if add.null_count == len(add):
        return pa.nulls(0, target)
    add = add.filter(add.is_valid()) if add.null_count else add
    try:
        return _add_stats(add, target, parse_json)
    except StatsParseError as exc:
        raise exc.of(add.field("path")[exc.row].as_py() if add.type.get_field_index("path") >= 0 else None) from exc


def _without_field(struct: pa.StructArray, name: str) -> pa.StructArray:
    """``struct`` without its field ``name`` (no copy of the other fields)."""
    if struct.type.get_field_index(name) < 0:
        return struct
    kept = [i for i, f in enumerate(struct.type) if f.name != name]
    return pa.StructArray.from_arrays([struct.field(i) for i in kept], fields=[struct.type.field(i) for i in kept],
                                      mask=struct.is_null() if struct.null_count else None)


def _add_stats(add: pa.StructArray, target: pa.StructType, parse_json: Callable[[pa.Array], pa.Array]) -> pa.Array:
    n = len(add)
    struct = field_or_none(add, "stats_parsed")
    parsed = conform_stats(struct, target) if struct is not None else None
    raw = field_or_none(add, "stats")
    if raw is None or raw.null_count == n:
        return parsed if parsed is not None else pa.nulls(n, target)
    if parsed is None:
        return parse_json(raw)
    missing = pc.and_(parsed.is_null(), raw.is_valid())
    if not pc.any(missing).as_py():
        return parsed
    return pc.if_else(missing, parse_json(pc.if_else(missing, raw, pa.scalar(None, pa.string()))), parsed)


def _batch_file_actions(batch: pa.RecordBatch | pa.Table, version: int) -> list[pa.Table]:
    pieces = []
    for kind in FILE_KINDS:
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
        child = field_or_none(col, name)
        if child is None:
            columns[name] = pa.nulls(n, typ)
            continue
        if name == "deletionVector":
            child = normalize_dv(child)
        columns[name] = child if child.type == typ else child.cast(typ)
    table = pa.table(columns, schema=FILE_CHANGES_SCHEMA)
    parsed = field_or_none(col, "stats_parsed")
    if parsed is not None:
        table = table.append_column("stats_parsed", parsed)
    return table
