"""Partition values of the files the enable rewrite writes: which types it can write (their serialized form is
``core.delta.partition_codec``'s), and the runs of equal values that become one file each."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.schema import PrimitiveType, StructType
from airflow_deltaberg.core.enable.rewrite.layout import ARROW_PRIMITIVES

_PARTITION_TYPES = frozenset(ARROW_PRIMITIVES) - {"binary", "void"}


def check_partition_types(schema: StructType, partition_columns: Sequence[str]) -> None:
    """Raise ValueError for a partition column whose values this writer cannot serialize."""
    for name in partition_columns:
        t = schema.field(name).type
        if not (isinstance(t, PrimitiveType) and (t.name in _PARTITION_TYPES or t.is_decimal)):
            raise ValueError(f"partition column {name} has type {t}, which the enable rewrite cannot write")


def partition_runs(batch: pa.RecordBatch, names: Sequence[str]) -> list[tuple[int, int]]:
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
