"""Rows read and compared through Spark: Delta tables as Delta on Spark reads them, converted tables as Iceberg
Java reads them (the Iceberg runtime in the same session), pyiceberg's and deltalake's rows (Arrow) in Spark's
collected form, and the comparison of both sides (column names, types and normalized, sorted rows)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from support.oracle import kernel_arrow, normal_type

#: Both Iceberg format versions the read checks run at: v2 (position delete files) and v3 (deletion vectors).
FORMAT_VERSIONS = pytest.mark.parametrize("format_version", [2, 3], ids=["v2", "v3"])


def run_sql(spark: Any, path: Path, *statements: str) -> None:
    """Run statements with ``@`` standing for the Delta table at ``path``."""
    for statement in statements:
        spark.sql(statement.replace("@", f"delta.`{path}`"))


def delta_df(spark: Any, path: Path, version: int | None = None) -> Any:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path))


def iceberg_df(spark: Any, metadata_location: str, snapshot_id: int | None = None, table: str = "") -> Any:
    """The Iceberg table (or its metadata table ``table``: files, manifests, ...) as Iceberg Java reads it."""
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("versionAsOf", snapshot_id)
    return reader.load(metadata_location + (f"#{table}" if table else ""))


def normal(value: Any) -> Any:
    """A comparable, hashable form of a collected value (rows keep their field names; maps become sorted entries;
    NaN a marker, as NaN != NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "<NaN>"
    if isinstance(value, bytearray):
        return bytes(value)
    if hasattr(value, "asDict"):  # pyspark Row
        return tuple((k, normal(v)) for k, v in value.asDict(recursive=False).items())
    if isinstance(value, dict):
        return tuple(sorted(((normal(k), normal(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (list, tuple)):
        return tuple(normal(v) for v in value)
    return value


def sorted_rows(rows: Any) -> list[Any]:
    return sorted(rows, key=repr)


def _simple(schema: Any) -> str:
    # Iceberg has no byte or short: Delta's tinyint/smallint columns read as int through Iceberg.
    return schema.simpleString().replace("tinyint", "int").replace("smallint", "int")


def type_string(df: Any) -> str:
    return _simple(df.schema)


def collect_rows_each(frames: Sequence[Any]) -> list[list[Any]]:
    """Each DataFrame's collected rows, in one Spark job per distinct schema rather than one per DataFrame: frames
    of the same schema are read as one UNION ALL of their own scans (each Iceberg snapshot, each Delta version
    read as it is alone), every branch tagged with its index."""
    from pyspark.sql import Row
    from pyspark.sql import functions as F

    groups: dict[str, list[int]] = {}
    for i, df in enumerate(frames):
        groups.setdefault(df.schema.json(), []).append(i)
    out: list[list[Any]] = [[] for _ in frames]
    for indexes in groups.values():
        make_row = Row(*frames[indexes[0]].columns)
        tagged = [frames[i].select("*", F.lit(i).alias("parity_index")) for i in indexes]
        for row in functools.reduce(lambda a, b: a.unionAll(b), tagged).collect():
            out[row[-1]].append(make_row(*row[:-1]))
    return out


def collect_each(frames: Sequence[Any]) -> list[list[Any]]:
    """Each DataFrame's rows, normalized and sorted (collect_rows_each)."""
    return [sorted_rows(normal(row) for row in rows) for rows in collect_rows_each(frames)]


def assert_same_rows(iceberg: Any, delta: Any, what: str, delta_rows: list[Any] | None = None,
                     iceberg_rows: list[Any] | None = None) -> None:
    """Same column names, types and rows (``delta_rows``, ``iceberg_rows``: the rows when already collected)."""
    ice_rows = iceberg_rows if iceberg_rows is not None else sorted_rows(normal(row) for row in iceberg.collect())
    ref_rows = delta_rows if delta_rows is not None else sorted_rows(normal(row) for row in delta.collect())
    _assert_same_read(what, ("Iceberg", iceberg.columns, type_string(iceberg), ice_rows),
                      ("Delta", delta.columns, type_string(delta), ref_rows))


def _assert_same_read(what: str, read: tuple[str, list[str], str, list[Any]],
                      expected: tuple[str, list[str], str, list[Any]]) -> None:
    """Two reads, each (reader, column names, type string, normalized sorted rows), are the same; a difference in
    rows is shown as the rows only one of them has."""
    (name, columns, types, rows), (expected_name, expected_columns, expected_types, expected_rows) = read, expected
    assert columns == expected_columns, what
    assert types == expected_types, what
    missing = [r for r in expected_rows if r not in rows]
    extra = [r for r in rows if r not in expected_rows]
    assert rows == expected_rows, f"{what}: rows only in {expected_name} {missing}, rows only in {name} {extra}"


#: Delta on Spark's reads of a table version: (path, version) -> (DataFrame, its rows). Every table read here is
#: written before it is read, and a table shared by a module's tests (both format versions) is read by all of
#: them: each version is loaded and collected once per process.
_DELTA_READS: dict[tuple[str, int], tuple[Any, list[Any]]] = {}


def delta_reads(spark: Any, path: Path, versions: list[int]) -> list[tuple[Any, list[Any]]]:
    """Delta on Spark's reads of ``versions`` of the table, those not read before collected together."""
    missing = sorted({v for v in versions if (str(path), v) not in _DELTA_READS})
    frames = [delta_df(spark, path, v) for v in missing]
    for version, delta, rows in zip(missing, frames, collect_each(frames), strict=True):
        _DELTA_READS[(str(path), version)] = (delta, rows)
    return [_DELTA_READS[(str(path), v)] for v in versions]


def _collected(value: Any, kind: pa.DataType) -> Any:
    """A value of an Arrow column as ``normal`` gives Spark's collected one: structs as rows (fields in order),
    maps as sorted entries; Spark collects TIMESTAMP as a naive datetime in the session zone (UTC here)."""
    if value is None:
        return None
    if pa.types.is_struct(kind):
        return tuple((f.name, _collected(value[f.name], f.type)) for f in kind)
    if pa.types.is_map(kind):
        entries = ((_collected(k, kind.key_type), _collected(v, kind.item_type)) for k, v in value)
        return tuple(sorted(entries, key=repr))
    if pa.types.is_list(kind):
        return tuple(_collected(v, kind.value_type) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return normal(value)


def arrow_rows(table: pa.Table, columns: Sequence[str]) -> list[Any]:
    """The rows of an Arrow table (pyiceberg's, deltalake's) in Spark's collected form, normalized and sorted,
    over ``columns`` in that order."""
    table = table.select(list(columns))
    # normal_type: timestamps in microseconds (INT96 reads as nanoseconds), one string and binary type.
    table = table.cast(pa.schema([pa.field(f.name, normal_type(f.type)) for f in table.schema]), safe=False)
    kinds = [table.schema.field(c).type for c in columns]
    return sorted_rows(tuple((c, _collected(row[c], k)) for c, k in zip(columns, kinds, strict=True))
                       for row in table.to_pylist())


def pyiceberg_rows(metadata_location: str, snapshot_id: int | None, columns: Sequence[str]) -> list[Any]:
    """pyiceberg's rows in Spark's collected form, over ``columns`` (Delta's order)."""
    return arrow_rows(StaticTable.from_metadata(metadata_location).scan(snapshot_id=snapshot_id).to_arrow(), columns)


@dataclass(frozen=True)
class DeltaRead:
    """A Delta version as a Delta reader reads it: column names, Spark's type string of the Delta schema, rows in
    Spark's collected form, and the live files' URIs."""

    columns: list[str]
    types: str
    rows: list[Any]
    files: list[str]


def spark_read(delta: Any, rows: list[Any]) -> DeltaRead:
    """Delta on Spark's read of a version: its DataFrame and collected ``rows``."""
    return DeltaRead(delta.columns, type_string(delta), rows, delta.inputFiles())


def kernel_read(path: Path, version: int) -> DeltaRead:
    """deltalake's kernel-based reader's (``QueryBuilder``) read of a version."""
    from pyspark.sql.types import StructType

    table = deltalake.DeltaTable(str(path), version=version)
    arrow = kernel_arrow(table)
    # Delta's schema is Spark's StructType JSON: its type string is the one Delta on Spark's DataFrame has.
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    assert arrow.column_names == schema.fieldNames(), f"{path.name} v{version}"
    return DeltaRead(schema.fieldNames(), _simple(schema), arrow_rows(arrow, schema.fieldNames()),
                      table.file_uris())


def assert_kernel_rows(iceberg: Any, delta: DeltaRead, what: str, iceberg_rows: list[Any]) -> None:
    """Iceberg's DataFrame has deltalake's column names, types (as Delta on Spark types them) and rows."""
    _assert_same_read(what, ("Iceberg", iceberg.columns, type_string(iceberg), iceberg_rows),
                      ("Delta", delta.columns, delta.types, delta.rows))


def assert_kernel_agrees_with_spark(delta: Any, delta_rows: list[Any], kernel: DeltaRead, what: str) -> None:
    """The two Delta oracles agree on a version: Delta on Spark's DataFrame (its collected ``delta_rows``) and
    deltalake's read of it have the same column names, types and rows."""
    _assert_same_read(what, ("Delta on Spark", delta.columns, type_string(delta), delta_rows),
                      ("deltalake", kernel.columns, kernel.types, kernel.rows))
