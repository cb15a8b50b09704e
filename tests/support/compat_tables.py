"""Build real Delta tables for the compliance tests.

``create_compliant_table`` writes version 0 (protocol + metaData) of an IcebergWriterCompatV1 table with the
project's commit writer; ``add_files`` writes real parquet data files with pyarrow (physical column names,
``PARQUET:field_id`` on every field including list elements and map keys/values, partition columns
materialized after the data columns, int64 timestamps) and commits ``add`` actions with full stats. Keyword
arguments of ``add_files`` break one of these properties at a time, so the tests can produce exactly the
table a rule must reject.

Schemas are given as ``(name, type)`` or ``(name, type, nullable)`` tuples where ``type`` is a Delta type in
its JSON form: a primitive name (``"long"``, ``"decimal(10,2)"``...) or what ``array``, ``map_`` and
``struct`` below return.

Commits go through ``support.delta_log`` (independent of the code under test).
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from support.delta_log import write_commit

if TYPE_CHECKING:
    from airflow_deltaberg.core.delta import DeltaTable

CM_ID = "delta.columnMapping.id"
CM_PHYSICAL = "delta.columnMapping.physicalName"
NESTED_IDS = "delta.columnMapping.nested.ids"
MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
FIELD_ID = b"PARQUET:field_id"

COMPLIANT_PROTOCOL: dict[str, Any] = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["columnMapping"],
    "writerFeatures": ["columnMapping", "icebergCompatV2", "icebergWriterCompatV1"],
}
COMPLIANT_PROPERTIES: dict[str, str] = {
    "delta.columnMapping.mode": "id",
    "delta.enableIcebergCompatV2": "true",
    "delta.enableIcebergWriterCompatV1": "true",
}

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
DV_MAGIC = 1681511377
ROARING_NO_RUNS_COOKIE = 12346


def z85(data: bytes) -> str:
    if len(data) % 4:
        raise ValueError("Z85 encodes multiples of 4 bytes")
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(_Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def inline_deletion_vector(rows: Sequence[int]) -> dict[str, Any]:
    """An inline (storageType ``i``) deletion vector deleting ``rows`` (indexes below 65536): the magic
    number, then a 64-bit portable RoaringBitmap with one bucket holding one array container.

    (The inline example of the protocol text does not start with the magic number; readers reject it.)"""
    values = sorted(set(rows))
    if not values or values[-1] >= 1 << 16 or len(values) > 4096:
        raise ValueError("1 to 4096 row indexes below 65536")
    le = "little"
    bitmap32 = (
        ROARING_NO_RUNS_COOKIE.to_bytes(4, le) + (1).to_bytes(4, le)  # cookie, one container
        + (0).to_bytes(2, le) + (len(values) - 1).to_bytes(2, le)  # its key and cardinality - 1
        + (16).to_bytes(4, le)  # its offset: after this 16-byte header
        + b"".join(v.to_bytes(2, le) for v in values)  # an array container
    )
    data = DV_MAGIC.to_bytes(4, le) + (1).to_bytes(8, le) + (0).to_bytes(4, le) + bitmap32
    data += b"\0" * (-len(data) % 4)  # Z85 needs whole 4-byte groups; trailing bytes are ignored
    return {"storageType": "i", "pathOrInlineDv": z85(data), "sizeInBytes": len(data), "cardinality": len(values)}


#: Rows 3, 4, 7, 11, 18 and 29 deleted (those of the protocol's inline example).
INLINE_DV: dict[str, Any] = inline_deletion_vector([3, 4, 7, 11, 18, 29])

SchemaField = tuple[str, Any] | tuple[str, Any, bool]


# -- Delta type constructors --------------------------------------------------------------------------


def array(element: Any, contains_null: bool = True) -> dict[str, Any]:
    return {"type": "array", "elementType": element, "containsNull": contains_null}


def map_(key: Any, value: Any, value_contains_null: bool = True) -> dict[str, Any]:
    return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": value_contains_null}


def struct(*fields: SchemaField) -> dict[str, Any]:
    return {"type": "struct", "fields": [_plain_field(f) for f in fields]}


def _plain_field(spec: SchemaField | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return copy.deepcopy(dict(spec))
    name, type_ = spec[0], spec[1]
    nullable = spec[2] if len(spec) > 2 else True
    return {"name": name, "type": copy.deepcopy(type_), "nullable": nullable, "metadata": {}}


# -- column mapping ids -------------------------------------------------------------------------------


def assign_column_mapping(fields: Sequence[SchemaField | Mapping[str, Any]]) -> tuple[dict[str, Any], int]:
    """The schema (JSON form) with ids and ``col-<id>`` physical names on every field, nested ids on array
    elements and map keys/values (keyed by the physical name of their nearest field), and the largest id.

    Column ids come first, depth first, as Delta on Spark assigns them; nested ids follow, after the
    largest column id (they are unique and distinct from column ids)."""
    schema = {"type": "struct", "fields": [_plain_field(f) for f in fields]}
    counter = 0

    def number_fields(struct_type: dict[str, Any]) -> None:
        nonlocal counter
        for f in struct_type["fields"]:
            counter += 1
            f.setdefault("metadata", {})
            f["metadata"][CM_ID] = counter
            f["metadata"][CM_PHYSICAL] = f"col-{counter}"
            for child in _child_structs(f["type"]):
                number_fields(child)

    def number_slots(struct_type: dict[str, Any]) -> None:
        nonlocal counter
        for f in struct_type["fields"]:
            ids: dict[str, int] = {}
            for key in _slot_keys(f["type"], f["metadata"][CM_PHYSICAL]):
                counter += 1
                ids[key] = counter
            if ids:
                f["metadata"][NESTED_IDS] = ids
            for child in _child_structs(f["type"]):
                number_slots(child)

    number_fields(schema)
    number_slots(schema)
    return schema, counter


def _child_structs(t: Any) -> Iterator[dict[str, Any]]:
    """The struct types directly below a type (through arrays and maps)."""
    if isinstance(t, dict):
        if t["type"] == "struct":
            yield t
        elif t["type"] == "array":
            yield from _child_structs(t["elementType"])
        elif t["type"] == "map":
            yield from _child_structs(t["keyType"])
            yield from _child_structs(t["valueType"])


def _slot_keys(t: Any, prefix: str) -> Iterator[str]:
    """``<prefix>.element``, ``<prefix>.key``, ``<prefix>.value``... down to the next struct."""
    if isinstance(t, dict) and t["type"] == "array":
        yield f"{prefix}.element"
        yield from _slot_keys(t["elementType"], f"{prefix}.element")
    elif isinstance(t, dict) and t["type"] == "map":
        yield f"{prefix}.key"
        yield from _slot_keys(t["keyType"], f"{prefix}.key")
        yield f"{prefix}.value"
        yield from _slot_keys(t["valueType"], f"{prefix}.value")


def _uses_type(t: Any, name: str) -> bool:
    if isinstance(t, str):
        return t == name
    if t["type"] == "struct":
        return any(_uses_type(f["type"], name) for f in t["fields"])
    if t["type"] == "array":
        return _uses_type(t["elementType"], name)
    if t["type"] == "map":
        return _uses_type(t["keyType"], name) or _uses_type(t["valueType"], name)
    return False


# -- the table ----------------------------------------------------------------------------------------


@dataclass
class BuiltTable:
    """A table written by these helpers: its root, its newest version and its current protocol/metaData."""

    path: Path
    version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def location(self) -> str:
        return str(self.path)

    def delta(self) -> DeltaTable:
        """The table opened by the code under test (for the tests' checks; the builders never use it)."""
        from airflow_deltaberg.core.delta import DeltaTable

        return DeltaTable(str(self.path))

    def schema(self) -> dict[str, Any]:
        """A copy of the current schema (JSON form), to edit and commit with ``set_schema``."""
        return json.loads(self.metadata["schemaString"])

    def field(self, name: str) -> dict[str, Any]:
        return next(f for f in self.schema()["fields"] if f["name"] == name)

    def physical(self, name: str) -> str:
        return self.field(name)["metadata"].get(CM_PHYSICAL, name)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata["configuration"])

    # -- commits --------------------------------------------------------------------------------------

    def commit(self, actions: Sequence[Mapping[str, Any]], operation: str = "WRITE") -> int:
        """Commit ``actions`` as the next version (support.delta_log's writer, not the project's)."""
        version = write_commit(self.path, actions, read_version=self.version, operation=operation)
        self.version = version
        for action in actions:
            if "protocol" in action:
                self.protocol = copy.deepcopy(dict(action["protocol"]))
            if "metaData" in action:
                self.metadata = copy.deepcopy(dict(action["metaData"]))
        return version

    def set_schema(self, schema: Mapping[str, Any]) -> int:
        """Commit a metaData action with ``schema`` (everything else unchanged)."""
        metadata = copy.deepcopy(self.metadata)
        metadata["schemaString"] = json.dumps(schema, separators=(",", ":"))
        return self.commit([{"metaData": metadata}], "CHANGE COLUMN")

    def set_properties(self, changes: Mapping[str, str | None]) -> int:
        """Commit a metaData action with the table properties changed (``None`` unsets a property)."""
        metadata = copy.deepcopy(self.metadata)
        metadata["configuration"] = _merged(metadata["configuration"], changes)
        return self.commit([{"metaData": metadata}], "SET TBLPROPERTIES")

    def set_protocol(self, changes: Mapping[str, Any]) -> int:
        """Commit a protocol action with fields replaced (``None`` drops a field)."""
        return self.commit([{"protocol": _merged(self.protocol, changes)}], "UPGRADE PROTOCOL")


def _merged(base: Mapping[str, Any], changes: Mapping[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in (changes or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = copy.deepcopy(value)
    return out


def create_compliant_table(
    path: str | Path,
    schema_fields: Sequence[SchemaField | Mapping[str, Any]],
    partition_by: Sequence[str] = (),
    extra_properties: Mapping[str, str | None] | None = None,
    protocol_overrides: Mapping[str, Any] | None = None,
) -> BuiltTable:
    """Write version 0 of an IcebergWriterCompatV1 table: protocol 3/7 (readerFeatures [columnMapping],
    writerFeatures [columnMapping, icebergCompatV2, icebergWriterCompatV1]) and a metaData in column
    mapping id mode, with ``col-<id>`` physical names, nested ids and maxColumnId.

    ``extra_properties`` and ``protocol_overrides`` are merged over the compliant ones; a ``None`` value
    removes the key."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    schema, max_id = assign_column_mapping(schema_fields)
    names = [f["name"] for f in schema["fields"]]
    unknown = [c for c in partition_by if c not in names]
    if unknown:
        raise ValueError(f"partition columns {unknown} are not in the schema {names}")
    configuration = _merged({**COMPLIANT_PROPERTIES, MAX_COLUMN_ID: str(max_id)}, extra_properties)
    protocol = copy.deepcopy(COMPLIANT_PROTOCOL)
    if _uses_type(schema, "timestamp_ntz"):  # Delta requires the timestampNtz feature (allowed by the RFC)
        protocol["readerFeatures"].append("timestampNtz")
        protocol["writerFeatures"].append("timestampNtz")
    protocol = _merged(protocol, protocol_overrides)
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema, separators=(",", ":")),
        "partitionColumns": list(partition_by),
        "configuration": configuration,
        "createdTime": int(time.time() * 1000),
    }
    table = BuiltTable(path, -1, protocol, metadata)
    version = write_commit(
        table.path, [{"protocol": protocol}, {"metaData": metadata}], read_version=None, operation="CREATE TABLE"
    )
    table.version = version
    return table


# -- data files ---------------------------------------------------------------------------------------

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
    "timestamp": pa.timestamp("us", "UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def _primitive(name: str) -> pa.DataType:
    if name in _PRIMITIVES:
        return _PRIMITIVES[name]
    if name.startswith("decimal(") and name.endswith(")"):
        precision, scale = (int(x) for x in name[len("decimal("):-1].split(","))
        return pa.decimal128(precision, scale)
    raise ValueError(f"no parquet type for Delta type {name!r} in these helpers")


def _meta(field_id: int | None) -> dict[bytes, bytes] | None:
    return None if field_id is None else {FIELD_ID: str(field_id).encode()}


class _IdPolicy:
    """Which parquet field id a field or slot gets: the Delta one, an override, or none."""

    def __init__(self, enabled: bool, overrides: Mapping[str, int | None]):
        self.enabled = enabled
        self.overrides = overrides

    def __call__(self, key: str, delta_id: int | None) -> int | None:
        if key in self.overrides:
            return self.overrides[key]
        return delta_id if self.enabled else None


def _arrow_field(f: Mapping[str, Any], ids: _IdPolicy) -> pa.Field:
    meta = f.get("metadata") or {}
    physical = meta.get(CM_PHYSICAL, f["name"])
    nested = meta.get(NESTED_IDS) or {}
    arrow_type = _arrow_type(f["type"], physical, nested, ids)
    field_id = ids(physical, meta.get(CM_ID))
    return pa.field(physical, arrow_type, nullable=f.get("nullable", True), metadata=_meta(field_id))


def _arrow_type(t: Any, slot: str, nested: Mapping[str, int], ids: _IdPolicy) -> pa.DataType:
    if isinstance(t, str):
        return _primitive(t)
    if t["type"] == "struct":
        return pa.struct([_arrow_field(child, ids) for child in t["fields"]])
    if t["type"] == "array":
        key = f"{slot}.element"
        element = _arrow_type(t["elementType"], key, nested, ids)
        return pa.list_(pa.field("element", element, nullable=t.get("containsNull", True),
                                 metadata=_meta(ids(key, nested.get(key)))))
    if t["type"] == "map":
        kkey, vkey = f"{slot}.key", f"{slot}.value"
        key_field = pa.field("key", _arrow_type(t["keyType"], kkey, nested, ids), nullable=False,
                             metadata=_meta(ids(kkey, nested.get(kkey))))
        value_field = pa.field("value", _arrow_type(t["valueType"], vkey, nested, ids),
                               nullable=t.get("valueContainsNull", True), metadata=_meta(ids(vkey, nested.get(vkey))))
        return pa.map_(key_field, value_field)
    raise ValueError(f"unknown Delta type {t!r}")


def _to_physical(value: Any, t: Any) -> Any:
    """A logical Python value (structs as dicts keyed by logical names) in the physical layout."""
    if value is None or isinstance(t, str):
        return value
    if t["type"] == "struct":
        return {
            (f.get("metadata") or {}).get(CM_PHYSICAL, f["name"]): _to_physical(value.get(f["name"]), f["type"])
            for f in t["fields"]
        }
    if t["type"] == "array":
        return [_to_physical(v, t["elementType"]) for v in value]
    if t["type"] == "map":
        items = value.items() if isinstance(value, Mapping) else value
        return [(_to_physical(k, t["keyType"]), _to_physical(v, t["valueType"])) for k, v in items]
    raise ValueError(f"unknown Delta type {t!r}")


def _partition_value(value: Any) -> str | None:
    """Partition value serialization of the protocol (strings as is, numbers in decimal, ISO dates)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _stat_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value) if value != value.to_integral_value() else int(value)
    return value


def _has_bounds(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_date(t)
            or pa.types.is_timestamp(t) or pa.types.is_decimal(t))


def column_stats(column: pa.Array, field: pa.Field) -> tuple[Any, Any, Any]:
    """(min, max, nullCount) of one column; structs give dicts keyed by physical names, min/max ``None``
    when the type has no bounds in Delta stats (binary, boolean, arrays, maps)."""
    if pa.types.is_struct(field.type):
        mins, maxs, nulls = {}, {}, {}
        for i, child in enumerate(field.type):
            values = pc.struct_field(column, [i])
            lo, hi, n = column_stats(values, child)
            if lo is not None:
                mins[child.name], maxs[child.name] = lo, hi
            nulls[child.name] = n
        return mins or None, maxs or None, nulls
    null_count = column.null_count
    if not _has_bounds(field.type) or null_count == len(column):
        return None, None, null_count
    bounds = pc.min_max(column)
    return _stat_value(bounds["min"].as_py()), _stat_value(bounds["max"].as_py()), null_count


def file_stats(data: pa.Table, skip: Sequence[str] = ()) -> dict[str, Any]:
    """numRecords, minValues, maxValues and nullCount of a physical table (``skip``: partition columns)."""
    mins, maxs, nulls = {}, {}, {}
    for field in data.schema:
        if field.name in skip:
            continue
        lo, hi, n = column_stats(data.column(field.name).combine_chunks(), field)
        if lo is not None:
            mins[field.name], maxs[field.name] = lo, hi
        nulls[field.name] = n
    return {"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


StatsMode = Literal["full", "without-num-records", "none"]


def add_files(
    table: BuiltTable,
    columns: Mapping[str, Sequence[Any]],
    *,
    field_ids: bool = True,
    field_id_overrides: Mapping[str, int | None] | None = None,
    int96_timestamps: bool = False,
    coerce_timestamps: Literal["ms", "us"] | None = None,
    materialize_partitions: bool = True,
    stats: StatsMode = "full",
    deletion_vector: Mapping[str, Any] | None = None,
    commit: bool = True,
) -> list[dict[str, Any]]:
    """Write ``columns`` (logical names -> Python values, one list per column) as parquet files, one per
    partition, and commit their ``add`` actions; returns the add actions.

    Defaults give compliant files. To break one property: ``field_ids=False`` (no PARQUET:field_id),
    ``field_id_overrides`` (physical name or nested-id key such as ``"col-3.element"`` -> id, ``None``
    for no id), ``int96_timestamps=True``, ``coerce_timestamps="ms"`` (INT64 TIMESTAMP_MILLIS, which Delta allows
    and Iceberg readers misread; values keep whole milliseconds), ``materialize_partitions=False``, ``stats`` without
    numRecords or none at all, ``deletion_vector`` on every add."""
    schema = table.schema()
    fields = schema["fields"]
    names = [f["name"] for f in fields]
    missing = [n for n in names if n not in columns]
    if missing:
        raise ValueError(f"no values for columns {missing}")
    lengths = {len(columns[n]) for n in names}
    if len(lengths) != 1:
        raise ValueError(f"columns have different lengths: {sorted(lengths)}")
    num_rows = lengths.pop()

    ids = _IdPolicy(field_ids, field_id_overrides or {})
    partition_by = list(table.metadata["partitionColumns"])
    by_name = {f["name"]: f for f in fields}
    # Data columns first, partition columns after them (IcebergCompatV1 wants them last).
    ordered = [f for f in fields if f["name"] not in partition_by] + [by_name[c] for c in partition_by]
    arrow_schema = pa.schema([_arrow_field(f, ids) for f in ordered])
    physical_partitions = [table.physical(c) for c in partition_by]

    groups: dict[tuple[Any, ...], list[int]] = {}
    for row in range(num_rows):
        groups.setdefault(tuple(columns[c][row] for c in partition_by), []).append(row)

    adds = []
    for key, rows in groups.items():
        arrays = [
            pa.array([_to_physical(columns[f["name"]][r], f["type"]) for r in rows], type=af.type)
            for f, af in zip(ordered, arrow_schema, strict=True)
        ]
        data = pa.Table.from_arrays(arrays, schema=arrow_schema)
        written = data if materialize_partitions else data.drop_columns(physical_partitions)
        directory = "/".join(f"{p}={_partition_value(v) if v is not None else '__HIVE_DEFAULT_PARTITION__'}"
                             for p, v in zip(physical_partitions, key, strict=True))
        name = f"part-{len(adds):05d}-{uuid.uuid4()}.c000.snappy.parquet"
        relative = f"{directory}/{name}" if directory else name
        target = table.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(written, target, compression="snappy", use_deprecated_int96_timestamps=int96_timestamps,
                       coerce_timestamps=coerce_timestamps)
        add: dict[str, Any] = {
            "path": quote(relative, safe="/="),
            "partitionValues": {p: _partition_value(v) for p, v in zip(physical_partitions, key, strict=True)},
            "size": target.stat().st_size,
            "modificationTime": int(target.stat().st_mtime * 1000),
            "dataChange": True,
        }
        if stats != "none":
            file_stat = file_stats(data, skip=physical_partitions)
            if stats == "without-num-records":
                del file_stat["numRecords"]
            add["stats"] = json.dumps(file_stat, separators=(",", ":"))
        if deletion_vector is not None:
            add["deletionVector"] = dict(deletion_vector)
        adds.append(add)
    if commit:
        table.commit([{"add": a} for a in adds], "WRITE")
    return adds
