"""Delta partition columns -> an Iceberg identity partition spec and typed partition data."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg import types as it
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform

from airflow_deltaberg.core.errors import PartitionValueError

PARTITION_FIELD_ID_START = 1000


def identity_spec(schema: Schema, partition_columns: Sequence[str],
                  previous: Sequence[PartitionSpec] = ()) -> PartitionSpec:
    """Identity partitioning over ``partition_columns``.

    Partition field ids are unique across all specs of a table (Iceberg spec, "Partition Evolution"): a field
    of an earlier spec with the same source and transform keeps its id, a new one gets an id above every id
    used so far. The spec id is assigned when the spec is added to the table metadata.
    """
    known = {(pf.source_id, str(pf.transform)): pf.field_id for spec in previous for pf in spec.fields}
    next_id = max([pf.field_id for spec in previous for pf in spec.fields], default=PARTITION_FIELD_ID_START - 1)
    fields = []
    for name in partition_columns:
        source_id = schema.find_field(name).field_id
        field_id = known.get((source_id, str(IdentityTransform())))
        if field_id is None:
            next_id += 1
            field_id = next_id
        fields.append(PartitionField(source_id=source_id, field_id=field_id, transform=IdentityTransform(), name=name))
    return PartitionSpec(*fields, spec_id=0)


def arrow_type(t: it.IcebergType) -> pa.DataType:
    """The Arrow type that carries partition values of an Iceberg type into the manifest writer."""
    if isinstance(t, it.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    return {
        it.IntegerType: pa.int32(),
        it.LongType: pa.int64(),
        it.FloatType: pa.float32(),
        it.DoubleType: pa.float64(),
        it.StringType: pa.string(),
        it.BinaryType: pa.binary(),
        it.BooleanType: pa.bool_(),
        it.DateType: pa.date32(),
        it.TimestampType: pa.timestamp("us"),
        it.TimestamptzType: pa.timestamp("us", "UTC"),
    }[type(t)]


def _parse_timestamps(values: pa.Array, utc: bool) -> pa.Array:
    """Delta's partition timestamp text: 'YYYY-MM-DD HH:MM:SS[.ffffff]' or ISO 8601 with Z (UTC)."""
    out = []
    for v in values.to_pylist():
        if v is None:
            out.append(None)
            continue
        parsed = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
        out.append(parsed)
    return pa.array(out, pa.timestamp("us", "UTC" if utc else None))


def parse_partition_values(strings: pa.Array, iceberg_type: it.IcebergType, column: str, table: str) -> pa.Array:
    """Typed partition values from Delta's string serialization (empty string and null mean null)."""
    strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)
    target = arrow_type(iceberg_type)
    try:
        if isinstance(iceberg_type, it.TimestamptzType):
            # Values without an offset were written in the writer's zone; like Delta on Spark readers
            # with a UTC session we read them as UTC.
            return _parse_timestamps(strings, utc=True)
        if isinstance(iceberg_type, it.TimestampType):
            return _parse_timestamps(strings, utc=False)
        if isinstance(iceberg_type, it.BooleanType):
            lowered = pc.utf8_lower(strings)
            bad = pc.and_(strings.is_valid(), pc.invert(pc.is_in(lowered, pa.array(["true", "false"]))))
            if pc.any(bad).as_py():
                raise ValueError("not true/false")
            return pc.equal(lowered, "true")
        if isinstance(iceberg_type, it.BinaryType):
            return pa.array([None if v is None else v.encode("latin-1") for v in strings.to_pylist()], pa.binary())
        return strings.cast(target)
    except (pa.ArrowInvalid, ValueError) as exc:
        raise PartitionValueError(
            f"partition values of column {column} do not parse as {iceberg_type}: {exc} (table {table})"
        ) from exc


def partition_struct(
    partition_values: pa.Array,
    spec: PartitionSpec,
    schema: Schema,
    physical_names: dict[str, str],
    table: str,
) -> pa.StructArray:
    """The typed partition struct of each file, from its partitionValues map (keys are physical names)."""
    n = len(partition_values)
    if isinstance(partition_values, pa.ChunkedArray):
        partition_values = partition_values.combine_chunks()
    children, fields = [], []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        key = physical_names.get(pf.name, pf.name)
        strings = pc.map_lookup(partition_values, key, "first") if n else pa.array([], pa.string())
        values = parse_partition_values(strings, source.field_type, pf.name, table)
        children.append(values)
        fields.append(pa.field(pf.name, arrow_type(source.field_type)))
    if not fields:
        return pa.StructArray.from_buffers(pa.struct([]), n, [None], children=[])
    return pa.StructArray.from_arrays(children, fields=fields)

