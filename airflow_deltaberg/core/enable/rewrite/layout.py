"""The physical layout of the files the enable rewrite writes, and the conversion of rows to it.

Columns are named by their physical name ``col-<id>`` and carry ``PARQUET:field_id`` equal to the column id on
every field, list elements and map keys/values included (Spark's own parquet writer cannot write those nested
ids; pyarrow can); ``byte``/``short`` are widened to ``integer``; timestamps are int64 microseconds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.delta.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType

#: The Arrow type of each Delta primitive in the physical layout.
ARROW_PRIMITIVES: dict[str, pa.DataType] = {
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
        if t.name not in ARROW_PRIMITIVES:
            raise ValueError(f"type {t.name} cannot be written by the enable rewrite")
        return ARROW_PRIMITIVES[t.name]
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
