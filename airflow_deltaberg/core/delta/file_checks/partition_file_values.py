"""Whether a data file that materializes a partition column holds the value its add action gives it.

Delta readers take a partition column's value from the add's partitionValues; Iceberg readers (table spec, Column
Projection) read a column the data file has from the file, and use the partition value only for one it lacks. A
file whose materialized partition column disagrees with its add (fuzz seed 8 case 6990: a checkpoint said null, the
file holds 2) reads differently through the two. Timestamp columns are not compared: a value without an offset is in
the writer's zone, which the log does not record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core.delta.file_checks.bounded_read import used_values
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.partition_codec import parse_partition_values
from airflow_deltaberg.core.delta.schema import PrimitiveType
from airflow_deltaberg.core.delta.stats.stats import value_type


def partition_value_mismatches(partition_values: Mapping[str, str | None] | Sequence[tuple[str, str | None]] | None,
                               footer: pq.FileMetaData, metadata: Metadata,
                               read_columns: Callable[[Sequence[str]], Iterable[pa.Table]]) -> list[str]:
    """One message per partition column the file materializes with values other than its add's
    ``partition_values`` (by physical name under column mapping; as ``to_pylist`` gives a map: pairs)."""
    if not metadata.partition_columns or partition_values is None:
        return []
    given = dict(partition_values)
    in_file = set(footer.schema.to_arrow_schema().names)
    wanted: list[tuple[str, str, pa.DataType]] = []
    for name, physical in zip(metadata.partition_columns, metadata.physical_partition_columns, strict=True):
        column_type = metadata.schema.field(name).type
        target = value_type(column_type) if isinstance(column_type, PrimitiveType) else None
        if physical in in_file and physical in given and target is not None and not pa.types.is_timestamp(target):
            wanted.append((name, physical, target))
    if not wanted:
        return []
    values = {}
    for _, physical, target in wanted:
        try:
            values[physical] = parse_partition_values(pa.array([given[physical]], pa.string()), target)[0]
        except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # a value that does not parse is refused by the replay
    found: dict[str, str] = {}  # the first disagreement of each column, read a slice at a time
    for part in read_columns([physical for _, physical, _ in wanted]):
        for name, physical, target in wanted:
            if physical not in values or physical in found:
                continue
            column = part.column(physical).combine_chunks()
            try:
                # A dictionary-encoded slice (bounded_read): the values it uses, and a null if it holds one.
                held = used_values(column).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values.pop(physical)  # a file type the types rule reports
                continue
            if column.null_count and not held.null_count:
                held = pa.concat_arrays([held, pa.nulls(1, target)])
            other = _other_value(held, values[physical])
            if other is not None:
                found[physical] = (f"partition column {name}: the add gives "
                                   f"{'null' if not values[physical].is_valid else repr(values[physical].as_py())}, "
                                   f"the file holds {other}")
    return [found[physical] for _, physical, _ in wanted if physical in found]


def _other_value(held: pa.Array, value: pa.Scalar) -> str | None:
    """A value of ``held`` other than ``value`` (null is a value here), shown; None when every one is it."""
    if not value.is_valid:
        return None if held.null_count == len(held) else repr(pc.min_max(held)["min"].as_py())
    if held.null_count:
        return "null"
    if len(held) and not pc.all(pc.equal(held, value)).as_py():
        return repr(held.filter(pc.invert(pc.fill_null(pc.equal(held, value), False)))[0].as_py())
    return None
