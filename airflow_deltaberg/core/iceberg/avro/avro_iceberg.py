"""Iceberg struct types in Avro: the writer schema with Iceberg field ids, and the column encoder that follows it.

Mapping (Iceberg spec, Appendix A): optional fields are ["null", T] unions with default null; maps are arrays of
{key, value} records with logicalType "map"; decimals are fixed(minimum bytes for the precision), big-endian.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from airflow_deltaberg.core.iceberg.arrow_values import (
    as_binary,
    bool_bytes,
    decimal_required_bytes,
    decimal_unscaled_le,
    fixed_bytes,
    float_bytes,
    int_values,
    validity,
)
from airflow_deltaberg.core.iceberg.avro.avro_encode import RowBuilder, binary_from_offsets, binary_parts, encode_long

# Byte strings of one common length up to this size are laid out in slots (no per-row join); others are joined
# as Arrow columns (C++ copies beat numpy gathers and masks for uneven lengths).
SLOT_BYTES = 32

# A struct's columns: a struct array, or a mapping from field name to an array or to a nested mapping.
Columns = pa.StructArray | Mapping[str, Any]

_INT_LIKE = (IntegerType, LongType, DateType, TimeType, TimestampType, TimestamptzType)


def avro_schema(struct: StructType, name: str) -> dict[str, Any]:
    """The Avro record schema of ``struct``, with field-id / element-id attributes."""
    return _record(struct, name, set())


def _unique(name: str, names: set[str]) -> str:
    # Avro forbids redefining a named type; two decimal(9,2) partition fields would both want "decimal_9_2".
    candidate, k = name, 1
    while candidate in names:
        candidate, k = f"{name}_{k}", k + 1
    names.add(candidate)
    return candidate


def _record(struct: StructType, name: str, names: set[str]) -> dict[str, Any]:
    record_name = _unique(name, names)
    return {"type": "record", "name": record_name, "fields": [_field_schema(f, names) for f in struct.fields]}


def _field_schema(field: NestedField, names: set[str]) -> dict[str, Any]:
    avro_type = _type_schema(field.field_type, f"r{field.field_id}", names)
    if field.required:
        return {"name": field.name, "type": avro_type, "field-id": field.field_id}
    return {"name": field.name, "type": ["null", avro_type], "default": None, "field-id": field.field_id}


def _optional(avro_type: Any, required: bool) -> Any:
    return avro_type if required else ["null", avro_type]


def _type_schema(t: IcebergType, record_name: str, names: set[str]) -> Any:
    if isinstance(t, StructType):
        return _record(t, record_name, names)
    if isinstance(t, ListType):
        items = _type_schema(t.element_type, f"r{t.element_id}", names)
        return {"type": "array", "items": _optional(items, t.element_required), "element-id": t.element_id}
    if isinstance(t, MapType):
        key = _type_schema(t.key_type, f"r{t.key_id}", names)
        value = _type_schema(t.value_type, f"r{t.value_id}", names)
        entry = {
            "type": "record",
            "name": _unique(f"k{t.key_id}_v{t.value_id}", names),
            "fields": [
                {"name": "key", "type": key, "field-id": t.key_id},
                {"name": "value", "type": _optional(value, t.value_required), "field-id": t.value_id},
            ],
        }
        return {"type": "array", "logicalType": "map", "items": entry}
    return _primitive_schema(t, names)


def _primitive_schema(t: IcebergType, names: set[str]) -> Any:
    simple = {
        BooleanType: "boolean",
        IntegerType: "int",
        LongType: "long",
        FloatType: "float",
        DoubleType: "double",
        StringType: "string",
        BinaryType: "bytes",
    }
    for iceberg_type, avro_name in simple.items():
        if isinstance(t, iceberg_type):
            return avro_name
    if isinstance(t, DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(t, TimeType):
        return {"type": "long", "logicalType": "time-micros"}
    if isinstance(t, TimestamptzType):
        return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True}
    if isinstance(t, TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}
    if isinstance(t, UUIDType):
        return {"type": "fixed", "name": _unique("uuid_fixed", names), "size": 16, "logicalType": "uuid"}
    if isinstance(t, FixedType):
        return {"type": "fixed", "name": _unique(f"fixed_{len(t)}", names), "size": len(t)}
    if isinstance(t, DecimalType):
        return {
            "type": "fixed",
            "name": _unique(f"decimal_{t.precision}_{t.scale}", names),
            "size": decimal_required_bytes(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    raise TypeError(f"no Avro mapping for Iceberg type {t}")


def encode_rows(struct: StructType, columns: Columns, n: int) -> pa.BinaryArray:
    """The Avro encoding of each of the ``n`` rows of ``struct`` given by ``columns``."""
    builder = RowBuilder(n)
    _encode_struct(builder, struct, columns)
    return builder.finish()


def _child(columns: Columns, name: str) -> Any:
    if isinstance(columns, pa.StructArray):
        index = columns.type.get_field_index(name)
        return columns.field(index) if index >= 0 else None
    col = columns.get(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _encode_struct(b: RowBuilder, struct: StructType, columns: Columns) -> None:
    for field in struct.fields:
        _encode_field(b, field, _child(columns, field.name))


def _encode_field(b: RowBuilder, field: NestedField, col: Any) -> None:
    t = field.field_type
    if col is None:
        if isinstance(t, StructType) and not t.fields:
            return  # an empty record (unpartitioned spec) encodes to no bytes
        if field.required:
            raise ValueError(f"missing required field {field.name!r}")
        b.const(b"\x00")
        return
    if isinstance(t, StructType):
        if not field.required:
            raise NotImplementedError(f"optional struct field {field.name!r}")
        if isinstance(col, pa.Array) and col.null_count:
            raise ValueError(f"null in required field {field.name!r}")
        _encode_struct(b, t, col)
        return
    if len(col) != b.n:
        raise ValueError(f"field {field.name!r} has {len(col)} values, expected {b.n}")
    if not field.required and b.n and col.null_count == b.n:
        b.const(b"\x00")  # the null branch in every row (manifests leave several fields null throughout)
        return
    valid = validity(col)
    if field.required:
        if valid is not None:
            raise ValueError(f"null in required field {field.name!r}")
    else:
        b.branch(valid)
    _encode_value(b, t, col, valid)


def _encode_value(b: RowBuilder, t: IcebergType, col: pa.Array, valid: np.ndarray | None) -> None:
    if isinstance(t, _INT_LIKE):
        b.long(int_values(col), valid)
    elif isinstance(t, BooleanType):
        b.matrix(bool_bytes(col), valid)
    elif isinstance(t, FloatType):
        b.matrix(float_bytes(col, 4), valid)
    elif isinstance(t, DoubleType):
        b.matrix(float_bytes(col, 8), valid)
    elif isinstance(t, (StringType, BinaryType)):
        _encode_bytes(b, col, valid)
    elif isinstance(t, UUIDType):
        b.matrix(fixed_bytes(col, 16), valid)
    elif isinstance(t, FixedType):
        b.matrix(fixed_bytes(col, len(t)), valid)
    elif isinstance(t, DecimalType):
        size = decimal_required_bytes(t.precision)
        little_endian = decimal_unscaled_le(col, t.precision, t.scale)
        b.matrix(little_endian[:, size - 1 :: -1], valid)  # low bytes, most significant first
    elif isinstance(t, ListType):
        _encode_array(b, col, valid, lambda ib, values: _encode_field(ib, t.element_field, values))
    elif isinstance(t, MapType) and pa.types.is_struct(col.type):
        _encode_keyed_columns(b, t, col, valid)
    elif isinstance(t, MapType):
        _encode_array(b, col, valid, lambda ib, values: _encode_map_entries(ib, t, values))
    else:
        raise TypeError(f"cannot encode Iceberg type {t}")


def _encode_bytes(b: RowBuilder, col: pa.Array, valid: np.ndarray | None) -> None:
    if pa.types.is_fixed_size_binary(col.type):
        width = col.type.byte_width
        b.const(encode_long(width), valid)
        if width:
            b.matrix(fixed_bytes(col, width), valid)
        return
    arr = as_binary(col)
    offsets, data = binary_parts(arr)
    lens = np.diff(offsets)
    b.long(lens, valid, nonnegative=True)
    n = len(arr)
    width = int(lens.max()) if n else 0
    if width == 0:
        return
    if width <= SLOT_BYTES and int(lens.min()) == width:
        start = int(offsets[0])
        b.matrix(np.frombuffer(data, np.uint8, count=start + n * width)[start:].reshape(n, width), valid)
    else:
        b.body(arr.fill_null(b"") if arr.null_count else arr)


def _encode_keyed_columns(b: RowBuilder, t: MapType, col: pa.StructArray, valid: np.ndarray | None) -> None:
    """A map of int keys given as one struct child per key (named by the key, null where the row has none):
    the Avro array of the present entries, encoded a child at a time instead of an entry at a time."""
    if not isinstance(t.key_type, IntegerType):
        raise TypeError(f"a map given as struct children needs int keys, not {t.key_type}")
    children = [col.field(i) for i in range(col.type.num_fields)]
    present = []
    for child in children:
        child_valid = validity(child)
        here = np.ones(b.n, bool) if child_valid is None else child_valid
        present.append(here if valid is None else here & valid)
    counts = np.sum(present, axis=0, dtype=np.int64) if present else np.zeros(b.n, np.int64)
    b.long(counts, counts > 0, nonnegative=True)
    for field, child, here in zip(col.type, children, present, strict=True):
        if not here.any():
            continue
        if valid is not None and child.null_count != b.n - int(here.sum()):
            child = pc.if_else(pa.array(here), child, pa.scalar(None, child.type))  # no bytes for null maps
        b.const(encode_long(int(field.name)), here)
        if not t.value_required:
            b.const(b"\x02", here)
        _encode_value(b, t.value_type, child, here)
    b.const(b"\x00", valid)


def _encode_map_entries(b: RowBuilder, t: MapType, entries: pa.Array) -> None:
    if entries.null_count:
        raise ValueError("null map entry")
    _encode_field(b, t.key_field, entries.field(0))
    _encode_field(b, t.value_field, entries.field(1))


def _encode_array(
    b: RowBuilder, col: pa.Array, valid: np.ndarray | None, encode_items: Callable[[RowBuilder, pa.Array], None]
) -> None:
    """Avro array framing: item count, items, 0 terminator (an empty array is the 0 alone)."""
    offsets = col.offsets.to_numpy()
    counts = np.diff(offsets)
    values = col.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if valid is not None and counts[~valid].any():
        # Arrow lets a null list cover items; Avro writes none for it.
        values = values.filter(pa.array(np.repeat(valid, counts)))
        counts = np.where(valid, counts, 0)
    item_builder = RowBuilder(len(values))
    encode_items(item_builder, values)
    item_offsets, data = binary_parts(item_builder.finish())
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    b.long(counts, counts > 0, nonnegative=True)
    b.body(binary_from_offsets(item_offsets[starts], data))
    b.const(b"\x00", valid)
