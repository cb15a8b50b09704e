"""Writing the data files of the enable rewrite, and the log actions that swap them in.

The rewrite reads the live rows of a table (logical column names, as any Delta reader returns them) and writes
them again in the layout IcebergWriterCompatV1 requires: columns named by their physical name ``col-<id>``,
``PARQUET:field_id`` equal to the column id on every field, list elements and map keys/values included (Spark's
own parquet writer cannot write those nested ids; pyarrow can), partition columns materialized in the file,
``byte``/``short`` widened to ``integer``, int64 timestamps. Each file gets an ``add`` action with full stats;
every old live file a ``remove`` with ``dataChange=false`` (the rows stay the same).

Nothing here needs Spark: ``write_files`` takes any iterator of Arrow batches, so it runs inside Spark
executors (``mapInArrow``) or in-process for small tables.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core import errors
from airflow_deltaberg.core.compat.rewrite_stats import DEFAULT_STRING_PREFIX, FileStats
from airflow_deltaberg.core.delta.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    parse_schema,
)
from airflow_deltaberg.core.storage import Storage, open_storage

FIELD_ID = b"PARQUET:field_id"
OPERATION = "ENABLE ICEBERG WRITER COMPAT"
#: The columns of the Arrow batches (and the Spark rows) describing the files ``write_files`` wrote.
WRITTEN_FILES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modification_time", pa.int64()),
        ("partition_values", pa.string()),  # JSON object, physical name -> serialized value or null
        ("stats", pa.string()),
        ("num_records", pa.int64()),
    ]
)
WRITTEN_FILES_DDL = (
    "path string, size long, modification_time long, partition_values string, stats string, num_records long"
)

_PRIMITIVES: dict[str, pa.DataType] = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", "UTC"),  # written as int64 micros, isAdjustedToUTC=true
    "timestamp_ntz": pa.timestamp("us"),  # isAdjustedToUTC=false
    "void": pa.null(),
}
_PARTITION_TYPES = frozenset(_PRIMITIVES) - {"binary", "void"}


# -- the physical Arrow schema ------------------------------------------------------------------------------


def _id_metadata(field_id: int | None, where: str) -> dict[bytes, bytes]:
    if field_id is None:
        raise ValueError(f"{where} has no column mapping id: the target schema must carry ids on every field")
    return {FIELD_ID: str(field_id).encode()}


def arrow_type(t: DataType, owner: StructField | None = None, slot: str = "") -> pa.DataType:
    """The Arrow type of a Delta type in the physical layout. ``owner`` is the nearest struct field above an
    array or map; ``slot`` the path below it (``.element``, ``.key``...), which names its nested ids."""
    if isinstance(t, PrimitiveType):
        if t.is_decimal:
            precision, scale = t.precision_scale
            return pa.decimal128(precision, scale)
        if t.name not in _PRIMITIVES:
            raise ValueError(f"type {t.name} cannot be written by the enable rewrite")
        return _PRIMITIVES[t.name]
    if isinstance(t, StructType):
        return pa.struct([arrow_field(f) for f in t.fields])
    assert owner is not None, "arrays and maps sit below a struct field"
    if isinstance(t, ArrayType):
        key = f"{slot}.element"
        element = arrow_type(t.element_type, owner, key)
        return pa.list_(pa.field("element", element, metadata=_nested(owner, key)))
    if isinstance(t, MapType):
        key, value = f"{slot}.key", f"{slot}.value"
        return pa.map_(
            pa.field("key", arrow_type(t.key_type, owner, key), nullable=False, metadata=_nested(owner, key)),
            pa.field("value", arrow_type(t.value_type, owner, value), metadata=_nested(owner, value)),
        )
    raise ValueError(f"unknown Delta type {t!r}")


def _nested(owner: StructField, key: str) -> dict[bytes, bytes]:
    return _id_metadata(owner.nested_id(key), f"{owner.name}{key}")


def arrow_field(f: StructField) -> pa.Field:
    """A column in the physical layout: named ``f.physical_name``, its field id the column id.

    Every column is optional in the file, as Spark writes them: nullability is the table schema's business,
    and a required parquet column would make a stray null unreadable rather than visible."""
    return pa.field(f.physical_name, arrow_type(f.type, f), metadata=_id_metadata(f.column_mapping_id, f.name))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the data files of a table in column mapping id mode (partition columns included)."""
    return pa.schema([arrow_field(f) for f in schema.fields])


# -- logical rows -> physical columns -------------------------------------------------------------------


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _offsets_and_children(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The int32 offsets of a (possibly sliced) list or map array rebased to 0, and its entries that they
    cover (``values`` ignores the slice, ``offsets`` does not)."""
    offsets = arr.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    values = arr.values.slice(start, end - start)
    if start:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return offsets.cast(pa.int32()), values


def to_physical(arr: pa.Array, t: DataType, target: pa.DataType) -> pa.Array:
    """Convert a column as a Delta reader returns it (struct children under logical names; bytes, shorts,
    large strings...) to the physical ``target`` type of ``arrow_type``."""
    if isinstance(t, StructType):
        children = [to_physical(arr.field(f.name), f.type, target.field(i).type) for i, f in enumerate(t.fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=_mask(arr))
    if isinstance(t, ArrayType):
        offsets, values = _offsets_and_children(arr)
        values = to_physical(values, t.element_type, target.value_type)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=_mask(arr))
    if isinstance(t, MapType):
        offsets, entries = _offsets_and_children(arr)
        keys = to_physical(entries.field(0), t.key_type, target.key_type)
        items = to_physical(entries.field(1), t.value_type, target.item_type)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=_mask(arr))
    return arr if arr.type == target else arr.cast(target)


def physical_batch(batch: pa.RecordBatch, schema: StructType, target: pa.Schema) -> pa.RecordBatch:
    """A batch with the table's columns under logical names -> the physical layout of ``target``."""
    columns = [to_physical(batch.column(f.name), f.type, target.field(i).type) for i, f in enumerate(schema.fields)]
    return pa.RecordBatch.from_arrays(columns, schema=target)


# -- partition values ---------------------------------------------------------------------------------


def check_partition_types(schema: StructType, partition_columns: Sequence[str]) -> None:
    """Raise ValueError for a partition column whose values this writer cannot serialize."""
    for name in partition_columns:
        t = schema.field(name).type
        if not (isinstance(t, PrimitiveType) and (t.name in _PARTITION_TYPES or t.is_decimal)):
            raise ValueError(f"partition column {name} has type {t}, which the enable rewrite cannot write")


def serialize_partition_value(value: Any, t: PrimitiveType) -> str | None:
    """A partition value as the protocol's "Partition Value Serialization" writes it (None for null).

    Timestamps are written in the recommended form: ISO8601 adjusted to UTC (``...T...Z``)."""
    if value is None:
        return None
    name = t.name
    if name == "boolean":
        return "true" if value else "false"
    if name == "timestamp":
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if name == "timestamp_ntz":
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if name == "date":
        return value.isoformat()
    if name in ("float", "double"):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"  # as Java's Double.toString, which readers parse
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _runs(batch: pa.RecordBatch, names: Sequence[str]) -> list[tuple[int, int]]:
    """(start, length) of the runs of equal partition values (nulls equal to nulls) in a batch."""
    n = batch.num_rows
    if not names or n <= 1:
        return [(0, n)] if n else []
    changed = None
    for name in names:
        col = batch.column(name)
        head, tail = col.slice(0, n - 1), col.slice(1)
        same = pc.or_(pc.fill_null(pc.equal(head, tail), False), pc.and_(head.is_null(), tail.is_null()))
        changed = pc.invert(same) if changed is None else pc.or_(changed, pc.invert(same))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
    ends = [*starts[1:], n]
    return [(s, e - s) for s, e in zip(starts, ends, strict=True)]


# -- writing files --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewriteSpec:
    """What the executors need to write the files of one rewrite (plain values: it is pickled to them)."""

    location: str
    schema_string: str  # the target schemaString (column mapping id mode)
    partition_columns: tuple[str, ...] = ()
    storage_options: Mapping[str, Any] | None = None
    write_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    compression: str = "snappy"
    row_group_rows: int = 1 << 20
    row_group_bytes: int = 128 << 20
    string_prefix: int = DEFAULT_STRING_PREFIX


@dataclass(frozen=True)
class WrittenFile:
    """A data file the rewrite wrote: what its add action needs."""

    path: str  # relative to the table root, URI-encoded as in the log
    size: int
    modification_time: int
    partition_values: dict[str, str | None]
    stats: str
    num_records: int


class _FileWriter:
    """One open data file: buffers batches into row groups, keeps the stats."""

    def __init__(self, storage: Storage, spec: RewriteSpec, schema: StructType, target: pa.Schema,
                 partition_values: dict[str, str | None], seq: int):
        self.key = f"part-{seq:05d}-{spec.write_id}-{uuid.uuid4()}.c000.{spec.compression}.parquet"
        self.storage = storage
        self.spec = spec
        self.partition_values = partition_values
        self.stats = FileStats(schema, frozenset(spec.partition_columns), spec.string_prefix)
        fs, self.full_path = storage.arrow_path(self.key)
        self.fs = fs
        self.writer = pq.ParquetWriter(self.full_path, target, filesystem=fs, compression=spec.compression,
                                       store_decimal_as_integer=True)
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.stats.update(batch)
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.pending_rows >= self.spec.row_group_rows or self.pending_bytes >= self.spec.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            # One row group per flush: Spark hands over small batches (10k rows) that would make tiny groups.
            self.writer.write_table(pa.Table.from_batches(self.pending), row_group_size=self.pending_rows)
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> WrittenFile:
        self._flush()
        self.writer.close()
        info = self.fs.get_file_info(self.full_path)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else int(time.time() * 1000)
        return WrittenFile(quote(self.key), int(info.size), mtime, self.partition_values, self.stats.to_json(),
                           self.stats.num_records)

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.storage.delete(self.key)


def write_files(batches: Iterable[pa.RecordBatch], spec: RewriteSpec) -> Iterator[WrittenFile]:
    """Write the rows of ``batches`` (logical column names, every column of the table) into new data files
    below the table root, one file per run of equal partition values: feed it rows sorted by the partition
    columns to get one file per partition value. Empty input writes nothing."""
    schema = parse_schema(spec.schema_string)
    target = arrow_schema(schema)
    check_partition_types(schema, spec.partition_columns)
    partition_fields = [schema.field(name) for name in spec.partition_columns]
    storage = open_storage(spec.location, spec.storage_options)
    current: _FileWriter | None = None
    seq = 0
    try:
        for batch in batches:
            for start, length in _runs(batch, spec.partition_columns):
                rows = batch.slice(start, length)
                values = {f.physical_name: serialize_partition_value(rows.column(f.name)[0].as_py(), f.type)
                          for f in partition_fields}
                if current is not None and current.partition_values != values:
                    yield current.close()
                    current = None
                if current is None:
                    current = _FileWriter(storage, spec, schema, target, values, seq)
                    seq += 1
                current.write(physical_batch(rows, schema, target))
        if current is not None:
            done, current = current, None
            yield done.close()
    finally:
        if current is not None:  # an error mid-file: leave no half-written file behind
            current.abort()


def written_files_batch(files: Sequence[WrittenFile]) -> pa.RecordBatch:
    """Files as one Arrow batch of ``WRITTEN_FILES_SCHEMA`` (what a mapInArrow task returns)."""
    return pa.RecordBatch.from_pylist(
        [{**asdict(f), "partition_values": json.dumps(f.partition_values)} for f in files],
        schema=WRITTEN_FILES_SCHEMA,
    )


def written_file_from_row(row: Mapping[str, Any]) -> WrittenFile:
    """The inverse of ``written_files_batch`` for one row (a dict, or a Spark Row as a dict)."""
    return WrittenFile(row["path"], int(row["size"]), int(row["modification_time"]),
                       json.loads(row["partition_values"]), row["stats"], int(row["num_records"]))


def delete_files(location: str, paths: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> None:
    """Delete files the rewrite wrote but did not commit (``paths`` as in WrittenFile.path)."""
    from urllib.parse import unquote

    storage = open_storage(location, storage_options)
    for path in paths:
        storage.delete(unquote(path))


# -- log actions ----------------------------------------------------------------------------------------


def add_action(f: WrittenFile) -> dict[str, Any]:
    """The ``add`` of a rewritten file: dataChange=false, as the rows are those of the removed files."""
    return {
        "add": {
            "path": f.path,
            "partitionValues": f.partition_values,
            "size": f.size,
            "modificationTime": f.modification_time,
            "dataChange": False,
            "stats": f.stats,
        }
    }


def _map(value: Any) -> dict[str, Any] | None:
    """A map column value from ``to_pylist`` (a list of pairs) as a dict."""
    return None if value is None else dict(value)


def remove_actions(files: pa.Table, deletion_timestamp: int) -> list[dict[str, Any]]:
    """A ``remove`` (dataChange=false) for every live file of a snapshot (``Snapshot.files``), with its
    deletion vector: readers key a logical file by path and deletion vector together."""
    wanted = ["path", "partitionValues", "size", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"]
    out = []
    for row in files.select(wanted).to_pylist():
        remove: dict[str, Any] = {
            "path": row["path"],
            "deletionTimestamp": deletion_timestamp,
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": _map(row["partitionValues"]) or {},
            "size": row["size"],
        }
        if row["tags"]:
            remove["tags"] = _map(row["tags"])
        if row["deletionVector"] is not None:
            remove["deletionVector"] = {k: v for k, v in row["deletionVector"].items() if v is not None}
        for key in ("baseRowId", "defaultRowCommitVersion"):
            if row[key] is not None:
                remove[key] = row[key]
        out.append({"remove": remove})
    return out


# -- the result -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewriteResult:
    """What one enable rewrite did: the version it read and the version it committed."""

    table: str
    read_version: int
    version: int
    files_removed: int
    files_added: int
    rows_written: int
    bytes_written: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> RewriteResult:
        return cls(**{k: value[k] for k in cls.__dataclass_fields__})


def result_document(result: RewriteResult | None = None, error: BaseException | None = None) -> dict[str, Any]:
    """The JSON document the application writes to ``--result-file``: ``{"result": {...}}`` on success,
    ``{"error": {"type", "message", "table", "version", "file"}}`` on failure."""
    if result is not None:
        return {"result": result.to_dict()}
    assert error is not None
    return errors.error_document(error, retryable=bool(getattr(error, "retryable", False)))


def result_from_document(document: Mapping[str, Any]) -> RewriteResult:
    """The RewriteResult of a result document, or raise the typed error it describes (a DeltaError subclass
    of ``core.errors`` when the type is one, otherwise DeltabergError)."""
    if "result" in document:
        return RewriteResult.from_dict(document["result"])
    error = document.get("error") or {}
    cls = getattr(errors, str(error.get("type")), None)
    message = str(error.get("message") or "the enable rewrite failed without a message")
    if isinstance(cls, type) and issubclass(cls, errors.DeltaError) and error.get("table"):
        # Built without its __init__: subclasses take other arguments (EnableBlockedError takes the plan), and
        # the message already names table, version and file.
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.table, exc.version, exc.file = error["table"], error.get("version"), error.get("file")
        raise exc
    if isinstance(cls, type) and issubclass(cls, errors.DeltabergError):
        raise cls(message)
    raise errors.DeltabergError(f"the enable rewrite failed: {error.get('type')}: {message}")
