"""Delta partition columns -> an Iceberg identity partition spec and typed partition data."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyiceberg import types as it
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform

from airflow_deltaberg.core.delta.partition_codec import parse_partition_values as delta_partition_values
from airflow_deltaberg.core.delta.partition_codec import partition_strings
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


def parse_partition_values(strings: pa.Array, iceberg_type: it.IcebergType, column: str, table: str) -> pa.Array:
    """Typed partition values of an Iceberg type from Delta's string serialization (empty string and null mean
    null); PartitionValueError for a value that does not parse."""
    try:
        return delta_partition_values(strings, arrow_type(iceberg_type))
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
    children, fields = [], []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        strings = partition_strings(partition_values, physical_names.get(pf.name, pf.name))
        values = parse_partition_values(strings, source.field_type, pf.name, table)
        children.append(values)
        fields.append(pa.field(pf.name, arrow_type(source.field_type)))
    if not fields:
        return pa.StructArray.from_buffers(pa.struct([]), n, [None], children=[])
    return pa.StructArray.from_arrays(children, fields=fields)

