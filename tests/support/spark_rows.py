"""Rows read and compared through Spark: Delta tables as Delta on Spark reads them, converted tables as Iceberg
Java reads them (the Iceberg runtime in the same session), pyiceberg's rows in Spark's collected form, and the
comparison of both sides (column names, types and normalized, sorted rows)."""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import StaticTable

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


def type_string(df: Any) -> str:
    # Iceberg has no byte or short: Delta's tinyint/smallint columns read as int through Iceberg.
    return df.schema.simpleString().replace("tinyint", "int").replace("smallint", "int")


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
    assert iceberg.columns == delta.columns, what
    assert type_string(iceberg) == type_string(delta), what
    ice_rows = iceberg_rows if iceberg_rows is not None else sorted_rows(normal(row) for row in iceberg.collect())
    ref_rows = delta_rows if delta_rows is not None else sorted_rows(normal(row) for row in delta.collect())
    missing = [r for r in ref_rows if r not in ice_rows]
    extra = [r for r in ice_rows if r not in ref_rows]
    assert ice_rows == ref_rows, f"{what}: rows only in Delta {missing}, rows only in Iceberg {extra}"


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


def _plain(value: Any) -> Any:
    # Spark collects TIMESTAMP as a naive datetime in the session zone (UTC here); pyiceberg gives it aware.
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return normal(value)


def pyiceberg_rows(metadata_location: str, snapshot_id: int | None, delta: Any) -> list[Any]:
    """pyiceberg's rows in Spark's collected form, columns in Delta's order."""
    table = StaticTable.from_metadata(metadata_location).scan(snapshot_id=snapshot_id).to_arrow()
    return sorted_rows(tuple((c, _plain(row[c])) for c in delta.columns) for row in table.to_pylist())
