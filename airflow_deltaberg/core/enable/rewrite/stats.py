"""Delta per-file statistics of the files the enable rewrite writes: numRecords, minValues, maxValues and
nullCount, keyed by physical names, computed from the Arrow data as it is written.

Bounds follow the protocol's "Per-file Statistics": timestamps truncated down to milliseconds, strings cut to
a prefix (``delta.dataSkippingStringPrefixLength``, 32 by default). A bound that could mislead a reader is
left out rather than guessed: a string maximum longer than the prefix (its prefix is below the real
maximum), and float bounds of a column holding NaN (Spark orders NaN above every number, so a NaN-free
maximum would let a reader skip rows that match ``x > 5``) or an infinite bound (not JSON). Like Delta on
Spark, partition columns get no stats (their values are in ``partitionValues``) and only these types get
bounds: numbers, dates, timestamps and strings.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.schema import DataType, PrimitiveType, StructField, StructType

DEFAULT_STRING_PREFIX = 32
_BOUNDED = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string"}
)
_EPOCH = dt.datetime(1970, 1, 1)


def has_bounds(t: DataType) -> bool:
    """Whether Delta keeps min/max values for a column of this type."""
    return isinstance(t, PrimitiveType) and (t.name in _BOUNDED or t.is_decimal)


class _Column:
    """Running stats of one leaf column over the batches of one file."""

    __slots__ = ("kind", "low", "high", "nulls", "no_bounds")

    def __init__(self, kind: str | None):
        self.kind = kind  # the Delta type name when bounded, else None (null count only)
        self.low: Any = None
        self.high: Any = None
        self.nulls = 0
        self.no_bounds = False

    def update(self, arr: pa.Array) -> None:
        self.nulls += arr.null_count
        if self.kind is None or self.no_bounds or arr.null_count == len(arr):
            return
        if self.kind in ("float", "double"):
            if pc.any(pc.is_nan(arr)).as_py():
                self.no_bounds = True
                return
        elif self.kind in ("timestamp", "timestamp_ntz"):
            arr = arr.cast(pa.int64())  # microseconds: compared and truncated as integers
        result = pc.min_max(arr)
        low, high = result["min"].as_py(), result["max"].as_py()
        self.low = low if self.low is None or low < self.low else self.low
        self.high = high if self.high is None or high > self.high else self.high


class FileStats:
    """Accumulates the stats of one data file from the physical batches written into it.

    ``schema`` is the target Delta schema (physical names come from its column mapping); ``exclude`` holds
    the logical names of top-level columns without stats (the partition columns).
    """

    def __init__(self, schema: StructType, exclude: frozenset[str] = frozenset(),
                 string_prefix: int = DEFAULT_STRING_PREFIX):
        self.fields = tuple(f for f in schema.fields if f.name not in exclude)
        self.string_prefix = string_prefix
        self.num_records = 0
        self._columns: dict[tuple[str, ...], _Column] = {}

    def update(self, batch: pa.RecordBatch) -> None:
        """Add a batch whose columns carry physical names (extra columns, e.g. partitions, are ignored)."""
        self.num_records += batch.num_rows
        for f in self.fields:
            self._visit(f, batch.column(f.physical_name), ())

    def _visit(self, f: StructField, arr: pa.Array, prefix: tuple[str, ...]) -> None:
        path = (*prefix, f.physical_name)
        if isinstance(f.type, StructType):
            # flatten() folds the struct's own nulls into its children: a null struct counts as a null leaf.
            children = arr.flatten()
            for child_field, child in zip(f.type.fields, children, strict=True):
                self._visit(child_field, child, path)
            return
        column = self._columns.get(path)
        if column is None:
            column = self._columns[path] = _Column(f.type.name if has_bounds(f.type) else None)
        column.update(arr)

    def to_dict(self) -> dict[str, Any]:
        """The stats object of the add action (before JSON encoding)."""
        minimum: dict[str, Any] = {}
        maximum: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for path, column in self._columns.items():
            _put(nulls, path, column.nulls)
            if column.kind is None or column.no_bounds or column.low is None:
                continue
            low = self._bound(column.kind, column.low, upper=False)
            high = self._bound(column.kind, column.high, upper=True)
            if low is not None:
                _put(minimum, path, low)
            if high is not None:
                _put(maximum, path, high)
        return {"numRecords": self.num_records, "minValues": minimum, "maxValues": maximum, "nullCount": nulls}

    def to_json(self) -> str:
        return dumps(self.to_dict())

    def _bound(self, kind: str, value: Any, *, upper: bool) -> Any:
        if kind in ("float", "double"):
            return value if math.isfinite(value) else None
        if kind in ("timestamp", "timestamp_ntz"):
            return format_timestamp_ms(value, utc=kind == "timestamp")
        if kind == "date":
            return value.isoformat()
        if kind == "string":
            if len(value) <= self.string_prefix:
                return value
            return None if upper else value[: self.string_prefix]
        return value  # integers and decimals


def _put(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        target = target.setdefault(name, {})
    target[path[-1]] = value


def format_timestamp_ms(micros: int, *, utc: bool) -> str:
    """Microseconds since the epoch, truncated down to milliseconds, as Delta writes timestamp stats
    (``2024-01-31T12:00:00.123Z``; without the ``Z`` for timestamp_ntz)."""
    millis = micros // 1000  # floor division: truncates down for dates before 1970 too
    moment = _EPOCH + dt.timedelta(milliseconds=millis)
    text = f"{moment:%Y-%m-%dT%H:%M:%S}.{millis % 1000:03d}"
    return f"{text}Z" if utc else text


def dumps(value: Any) -> str:
    """Compact JSON in which decimals are written as exact numbers (json.dumps refuses Decimal)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value, separators=(",", ":"))
