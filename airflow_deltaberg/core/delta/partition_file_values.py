"""Whether a data file that materializes a partition column holds the value its add action gives it.

Delta readers take a partition column's value from the add's partitionValues; Iceberg readers (table spec, Column
Projection) read a column the data file has from the file, and use the partition value only for one it lacks. A
file whose materialized partition column disagrees with its add (fuzz seed 8 case 6990: a checkpoint said null, the
file holds 2) reads differently through the two. Timestamp columns are not compared: a value without an offset is in
the writer's zone, which the log does not record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.partition_codec import parse_partition_values
from airflow_deltaberg.core.delta.schema import PrimitiveType
from airflow_deltaberg.core.delta.stats import value_type


def partition_value_mismatches(partition_values: Mapping[str, str | None] | Sequence[tuple[str, str | None]] | None,
                               footer: pq.FileMetaData, metadata: Metadata,
                               read_columns: Callable[[Sequence[str]], pa.Table]) -> list[str]:
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
    table = read_columns([physical for _, physical, _ in wanted])
    problems = []
    for name, physical, target in wanted:
        try:
            value = parse_partition_values(pa.array([given[physical]], pa.string()), target)[0]
            held = table.column(physical).cast(target)
        except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # a value that does not parse is refused by the replay; a file type the types rule reports
        if not value.is_valid:
            if held.null_count != len(held):
                problems.append(f"partition column {name}: the add gives null, the file holds "
                                f"{pc.min_max(held)['min'].as_py()!r}")
        elif held.null_count or len(held) and not pc.all(pc.equal(held, value)).as_py():
            other = held.filter(pc.invert(pc.fill_null(pc.equal(held, value), False)))[0].as_py()
            problems.append(f"partition column {name}: the add gives {value.as_py()!r}, the file holds "
                            f"{'null' if other is None else repr(other)}")
    return problems
