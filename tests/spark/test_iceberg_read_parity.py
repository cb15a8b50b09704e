"""Parity with Iceberg's Java reference implementation: converted tables read through Spark with the Iceberg
runtime (1.12.0) give the rows Delta on Spark gives.

Each table is written by Delta on Spark (or by deltalake), converted with ``convert()`` one Delta version at a
time (a full conversion of version 0, then one incremental run: one Iceberg snapshot per Delta commit), and
converted once more in full (one more snapshot, of the latest version). Then:

1. rows: ``spark.read.format("iceberg").option("versionAsOf", <snapshot id>).load(<metadata file>)`` equals
   the Delta version as deltalake's kernel reader (``QueryBuilder``) reads it, for every Delta version, and the
   latest version and the full re-conversion equal ``spark.read.format("delta").load(<table>)`` too (which agrees
   with deltalake): same column names and types (byte/short read as int: Iceberg has neither), same rows
   (collected, normalized, sorted); each snapshot's total-records and total-data-files are Delta's;
2. filters: predicates per type (data and partition columns, nested fields, nulls, values at the edges of Delta's
   truncated stats) select the same ids through Iceberg, which prunes files with our partition values, partition
   summaries and column bounds, as Delta's own evaluation of the predicate on every row; aggregates that Iceberg
   answers from the metadata alone (aggregate push-down) equal Delta's;
3. Iceberg's metadata tables (``#snapshots``, ``#files``, ``#manifests``, ``#partitions``), read by Iceberg Java,
   agree with the data: the data files are Delta's live files with their record counts, sizes and partition
   values, every lower/upper bound of ``readable_metrics`` holds for every row of its file (min <= value <= max),
   null counts are exact, snapshots chain, partition record and file counts are Delta's.

Known differences once found here each got a small table and a test of their own (timestamp aggregates, special
floats, signed zeros, CHAR, mapped lists of primitives, column mapping upgrades, repartitioning); each is fixed or
refused with a clear error now, and the tests keep it that way.

Time: Delta on Spark time travel costs a snapshot load per version (~2-3.5 CPU s), deltalake's a fraction of
that, so Delta on Spark reads only the latest version (every version of a table deltalake misreads); the tables
have few commits; Delta evaluates every predicate in one scan (booleans per row), Iceberg in one UNION ALL of
filtered scans (one pushed-down filter each).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.spark_rows import (
    assert_kernel_agrees_with_spark,
    assert_kernel_rows,
    assert_same_rows,
    collect_each,
    collect_rows_each,
    delta_df,
    iceberg_df,
    kernel_read,
    normal,
    run_sql,
    spark_read,
)

from airflow_deltaberg.core.errors import UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark

NO_DV = "'delta.enableDeletionVectors' = 'false'"
UPGRADE_TO_NAME_MAPPING = (
    "ALTER TABLE @ SET TBLPROPERTIES ('delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5', "
    "'delta.columnMapping.mode' = 'name')"
)


# -- helpers ----------------------------------------------------------------------------------------------


def local_path(uri: str) -> str:
    """A file path from a Spark file URI (``file:/...``, %-encoded) or a plain path (as Iceberg stores it)."""
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme == "file" else uri


def with_file(df: Any) -> Any:
    """``df`` with the path of each row's data file first (Spark's ``_metadata.file_path``, a URI)."""
    from pyspark.sql import functions as F

    return df.select(F.col("_metadata.file_path").alias("parity_file"), "*")


@contextmanager
def temp_views(spark: Any, **frames: Any) -> Iterator[None]:
    for name, df in frames.items():
        df.createOrReplaceTempView(name)
    try:
        yield
    finally:
        for name in frames:
            spark.catalog.dropTempView(name)


def iceberg_ids_by_predicate(spark: Any, df: Any, predicates: tuple[str, ...]) -> list[list[Any]]:
    """The ids each predicate selects through Iceberg: one UNION ALL of filtered scans (each scan plans its files
    with its own pushed-down filter)."""
    with temp_views(spark, parity_iceberg=df):
        query = " UNION ALL ".join(
            f"SELECT {i} AS q, id FROM parity_iceberg WHERE {p}" for i, p in enumerate(predicates)
        )
        out: list[list[Any]] = [[] for _ in predicates]
        for row in spark.sql(query).collect():
            out[row.q].append(row.id)
    return [sorted(ids, key=repr) for ids in out]


def delta_ids_by_predicate(spark: Any, df: Any, predicates: tuple[str, ...]) -> list[list[Any]]:
    """The ids each predicate selects, every predicate evaluated on every row of one Delta scan (a WHERE keeps
    the rows where the predicate is true, not null)."""
    with temp_views(spark, parity_delta=df):
        flags = ", ".join(f"coalesce({p}, false) AS q{i}" for i, p in enumerate(predicates))
        rows = spark.sql(f"SELECT id, {flags} FROM parity_delta").collect()
    return [sorted((row.id for row in rows if row[f"q{i}"]), key=repr) for i in range(len(predicates))]


def assert_same_filtered_ids(spark: Any, iceberg: Any, delta: Any, predicates: tuple[str, ...], what: str) -> None:
    ice = iceberg_ids_by_predicate(spark, iceberg, predicates)
    ref = delta_ids_by_predicate(spark, delta, predicates)
    diffs = {p: {"iceberg": i, "delta": d} for p, i, d in zip(predicates, ice, ref, strict=True) if i != d}
    assert not diffs, f"{what}: predicates selecting other rows through Iceberg than through Delta: {diffs}"
    assert any(ref), f"{what}: no predicate selects any row (the table is not what the test expects)"


def leaf_columns(schema: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Primitive columns outside lists and maps (those Iceberg's readable_metrics lists), by name path."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    for f in schema.fields:
        path = (*prefix, f.name)
        if isinstance(f.dataType, StructType):
            yield from leaf_columns(f.dataType, path)
        elif not isinstance(f.dataType, (ArrayType, MapType)):
            yield path, f.dataType


def facts_per_file(spark: Any, delta: Any, leaves: list[tuple[tuple[str, ...], Any]]) -> dict[str, dict[str, Any]]:
    """Per live Delta file (local path): its row count, and per leaf column i the min ``lo<i>`` and max ``hi<i>``
    (NaN left out) and the null count ``nulls<i>`` of its values, from the rows Delta on Spark reads."""
    from pyspark.sql.types import DoubleType, FloatType

    exprs = ["parity_file", "count(*) AS n"]
    for i, (path, dtype) in enumerate(leaves):
        col = ".".join(f"`{p}`" for p in path)
        floating = isinstance(dtype, (FloatType, DoubleType))
        value = f"CASE WHEN isnan({col}) THEN NULL ELSE {col} END" if floating else col
        exprs += [f"min({value}) AS lo{i}", f"max({value}) AS hi{i}", f"count_if({col} IS NULL) AS nulls{i}"]
    with temp_views(spark, parity_files=with_file(delta)):
        rows = spark.sql(f"SELECT {', '.join(exprs)} FROM parity_files GROUP BY parity_file").collect()
    return {local_path(row.parity_file): row.asDict() for row in rows}


# -- the tables -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A Delta table: how to write it (every commit), its partition columns, predicates to compare."""

    build: Callable[[Any, Path], None]
    partition_columns: tuple[str, ...]
    predicates: tuple[str, ...]
    #: Why deltalake's kernel reader cannot be the oracle of this table ('': it reads the versions before the latest).
    kernel_misreads: str = ""


@dataclass(frozen=True)
class Converted:
    name: str
    case: Case
    path: Path
    metadata_location: str
    #: the incremental snapshots: Delta version -> Iceberg snapshot id (one per Delta commit)
    snapshots: dict[int, int]
    #: the snapshot of the last, full conversion of the latest version
    full_snapshot_id: int
    latest_version: int
    #: the rows of ``#snapshots``, in table order
    snapshot_rows: tuple[Any, ...]


TYPES_COLUMNS = """id INT, b BOOLEAN, i8 TINYINT, i16 SMALLINT, i64 BIGINT, f FLOAT, dbl DOUBLE, dec DECIMAL(10,2),
    dec38 DECIMAL(38,10), s STRING, bin BINARY, d DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ,
    st STRUCT<a: INT, inner: STRUCT<c: STRING, t: TIMESTAMP>>, arr ARRAY<INT>, arrs ARRAY<STRUCT<e: STRING>>,
    m MAP<STRING, INT>, p_str STRING, p_int INT"""

TYPES_ROWS = """
    (1, true, 1Y, 1S, 1L, 1.5F, 1.5D, 1.25BD, 12345678901234567890.0123456789BD, 'a', X'00FF', DATE'2020-01-01',
     TIMESTAMP'2020-01-01 00:00:00.123456', TIMESTAMP_NTZ'2020-01-01 00:00:00.000001',
     named_struct('a', 1, 'inner', named_struct('c', 'x', 't', TIMESTAMP'2021-01-01 00:00:00.5')),
     array(1, 2), array(named_struct('e', 'e1')), map('k', 1), 'x', 1),
    (2, false, -128Y, -32768S, -9223372036854775808L, -3.4028234E38F, -1.7976931348623157E308D, -99999999.99BD,
     -1.0000000001BD, repeat('z', 40), X'', DATE'1969-12-31', TIMESTAMP'1969-12-31 23:59:59.999999',
     TIMESTAMP_NTZ'1900-01-01 00:00:00.999999', named_struct('a', NULL, 'inner', NULL), array(), array(), map(),
     'x', 1),
    (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL),
    (4, true, 127Y, 32767S, 9223372036854775807L, 3.4028234E38F, 1.7976931348623157E308D, 99999999.99BD,
     -12345678901234567890.0123456789BD, 'ü€😀', X'FF', DATE'9999-12-31', TIMESTAMP'9999-12-31 23:59:59.999999',
     TIMESTAMP_NTZ'0001-01-01 00:00:00', named_struct('a', 4, 'inner', named_struct('c', repeat('é', 40), 't', NULL)),
     array(NULL), array(NULL), map('n', NULL), 'a/b', NULL),
    (5, false, 0Y, 0S, 0L, 0.0F, 2.5D, 0.00BD, 0.0000000001BD, 'a b', X'01', DATE'2000-02-29',
     TIMESTAMP'2020-01-01 00:00:00.123', TIMESTAMP_NTZ'2020-01-01 00:00:00.123',
     named_struct('a', 5, 'inner', named_struct('c', 'w', 't', TIMESTAMP'2020-01-01 00:00:00.123')),
     array(5), array(named_struct('e', 'e5')), map('k', 5), 'a b%c=d:e', 2),
    (6, true, 6Y, 6S, 6L, 6.5F, 6.5D, 6.50BD, 6BD, 'f', X'06', DATE'2020-06-06', TIMESTAMP'2020-06-06 06:06:06.666666',
     TIMESTAMP_NTZ'2020-06-06 06:06:06.666666',
     named_struct('a', 6, 'inner', named_struct('c', 'v', 't', TIMESTAMP'2020-06-06 00:00:00')),
     array(6), array(), map('k', 6), NULL, 2),
    (7, false, 7Y, 7S, 7L, 7.5F, 7.5D, 7.75BD, 7BD, 'g', NULL, DATE'2020-07-07', TIMESTAMP'2020-07-07 07:07:07',
     NULL, NULL, NULL, NULL, NULL, 'x', 1),
    (8, true, 8Y, 8S, 8L, 8.5F, 8.5D, 8.88BD, 8BD, 'ü€😀h', X'08', DATE'2020-08-08', TIMESTAMP'2020-08-08 08:08:08.8',
     TIMESTAMP_NTZ'2020-08-08 08:08:08.8', named_struct('a', 8, 'inner', named_struct('c', NULL, 't', NULL)),
     array(8, 8), array(named_struct('e', NULL)), map('k', 8, 'l', 9), '', 3)"""


def build_spark_types(spark: Any, path: Path) -> None:
    """No column mapping; partitioned by a string and an int, with nulls ('' is null too) and values escaped in
    paths; every primitive type, extreme values, nested types. Then a delete rewriting some files and removing
    others whole, and an update moving a row to another partition."""
    run_sql(
        spark, path,
        f"CREATE TABLE @ ({TYPES_COLUMNS}) USING delta PARTITIONED BY (p_str, p_int) TBLPROPERTIES ({NO_DV})",
        f"INSERT INTO @ VALUES {TYPES_ROWS}",
        "DELETE FROM @ WHERE id IN (2, 7) OR p_int = 2",
        "UPDATE @ SET s = 'updated', p_str = 'moved', ts = TIMESTAMP'2030-01-01 00:00:00.000001' WHERE id = 1",
    )


TYPES_PREDICATES = (
    "id = 4", "id IN (1, 3, 8)", "b", "b IS NULL",
    "i8 = 127", "i16 = 32767", "i64 = 9223372036854775807", "i64 < 2",
    "f > 3e38", "f = 8.5", "dbl > 1e308", "dbl BETWEEN 1 AND 7",
    "dec = 99999999.99", "dec < 2", "dec38 = -12345678901234567890.0123456789", "dec38 >= 8",
    "s = 'updated'", "s LIKE 'ü%'", "s = 'ü€😀'", "s IN ('a b', 'g', 'f')", "s IS NULL", "s < 'b'",
    "bin = X'FF'", "bin IS NULL",
    "d = DATE'9999-12-31'", "d < DATE'2000-03-01'",
    "ts = TIMESTAMP'2030-01-01 00:00:00.000001'", "ts > TIMESTAMP'2030-01-01 00:00:00'",
    "ts >= TIMESTAMP'9999-12-31 23:59:59.999999'", "ts > TIMESTAMP'2020-08-08 08:08:08.799999'",
    "ntz = TIMESTAMP_NTZ'2020-01-01 00:00:00.000001'", "ntz > TIMESTAMP_NTZ'2020-01-01 00:00:00'",
    "ntz < TIMESTAMP_NTZ'0001-01-01 00:00:00.000001'", "ntz IS NULL",
    "st.a = 1", "st IS NULL", "st.inner.c = 'x'", "st.inner.c = repeat('é', 40)", "st.inner.c > repeat('é', 32)",
    "st.inner.t > TIMESTAMP'2020-12-31 23:59:59.999'", "st.inner IS NULL",
    "size(arr) > 1", "array_contains(arr, 8)", "try_element_at(m, 'k') = 1", "get(arrs, 0).e = 'e1'",
    "p_str = 'x'", "p_str = 'a/b'", "p_str = 'moved'", "p_str IS NULL", "p_str > 'b'",
    "p_int = 1", "p_int IS NULL", "p_int >= 2",
    "p_str = 'x' AND id > 1", "p_str IS NULL OR s IS NULL", "NOT (p_int = 1)",
)


def build_name_mapping(spark: Any, path: Path) -> None:
    """Column mapping mode name from the start: renames (top-level and nested), a column added under a name used
    before, names with a dot and a space."""
    run_sql(
        spark, path,
        f"CREATE TABLE @ USING delta PARTITIONED BY (p) TBLPROPERTIES ({NO_DV}, 'delta.columnMapping.mode' = 'name') "
        """AS SELECT * FROM VALUES
        (1, 'a1', named_struct('x', 1, 'y', 'y1'), array(named_struct('e', 1)), map('k', named_struct('v', 1)), 10,
         's1', 'p1'),
        (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
        (3, 'a3', named_struct('x', 3, 'y', NULL), array(), map(), 30, 's3', 'p/2')
        AS t(id, a, st, arrs, ms, `dotted.name`, `with space`, p)""",
        "ALTER TABLE @ RENAME COLUMN a TO a2",
        "ALTER TABLE @ RENAME COLUMN st.x TO x2",
        "ALTER TABLE @ ADD COLUMN (a STRING)",
        """INSERT INTO @ VALUES (4, 'a2_4', named_struct('x2', 4, 'y', NULL), array(named_struct('e', 4)),
        map('k4', named_struct('v', 4)), 40, 's4', 'p1', 'new4')""",
    )


NAME_MAPPING_PREDICATES = (
    "id = 1", "a2 = 'a1'", "a2 IS NULL", "a2 > 'a2'", "st.x2 = 3", "st.x2 IS NULL", "st IS NULL", "st.y = 'y1'",
    "`dotted.name` = 30", "`dotted.name` > 15", "`with space` = 's4'", "`with space` IS NULL", "a = 'new4'",
    "a IS NULL", "p = 'p/2'", "p IS NULL", "p = 'p1' AND id > 1", "get(arrs, 0).e = 4",
    "try_element_at(ms, 'k').v = 1",
)


def build_id_mapping(spark: Any, path: Path) -> None:
    """Column mapping mode id with IcebergCompatV2 (nested ids for list elements and map keys/values, which
    Iceberg Java needs to read lists and maps of primitives; tags on every file), date and int partitions, a
    nested rename, a delete."""
    run_sql(
        spark, path,
        "CREATE TABLE @ USING delta PARTITIONED BY (d, g) "
        f"TBLPROPERTIES ({NO_DV}, 'delta.columnMapping.mode' = 'id', 'delta.enableIcebergCompatV2' = 'true') "
        """AS SELECT id, s, st, arr, m, ts, d, g FROM VALUES
        (1, 'a', named_struct('n', named_struct('v', CAST(1.25 AS DECIMAL(9,2)))), array(1, NULL), map('k', 1),
         TIMESTAMP_NTZ'2020-01-01 00:00:00.000001', DATE'2020-01-01', 1),
        (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
        (3, 'c', named_struct('n', NULL), array(), map(), TIMESTAMP_NTZ'1999-12-31 23:59:59.999', DATE'1969-12-31',
         -1)
        AS t(id, s, st, arr, m, ts, d, g)""",
        "ALTER TABLE @ RENAME COLUMN st.n.v TO w",
        """INSERT INTO @ VALUES (4, 'd', named_struct('n', named_struct('w', -9999999.99)), array(4),
        map('k', 4, 'l', NULL), TIMESTAMP_NTZ'2020-01-01 00:00:00.001', DATE'2020-01-01', 1)""",
        "DELETE FROM @ WHERE id = 3",
    )


ID_MAPPING_PREDICATES = (
    "id = 4", "st.n.w < 0", "st.n.w = 1.25", "st.n IS NULL", "ts > TIMESTAMP_NTZ'2020-01-01 00:00:00.000001'",
    "ts = TIMESTAMP_NTZ'2020-01-01 00:00:00.001'", "d = DATE'2020-01-01'", "d IS NULL", "d < DATE'2000-01-01'",
    "array_contains(arr, 4)",
    "try_element_at(m, 'l') IS NULL", "s IS NULL", "s = 'a'", "g = 1", "g IS NULL",
)


def build_deltalake(spark: Any, path: Path) -> None:
    """Written by deltalake (delta-rs): partitions with nulls, an append merging a new column into the schema, an
    update (a file rewritten) and a compaction (dataChange=false)."""
    first = pa.table({
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "i8": pa.array([1, None, -128, 2], pa.int8()),
        "f32": pa.array([1.5, -2.5, None, 2.5], pa.float32()),
        "dec": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-99999999.99"), decimal.Decimal("2")],
                        pa.decimal128(10, 2)),
        "s": pa.array(["a", None, "z" * 50, "d"], pa.large_string()),
        "b": pa.array([b"\x00", None, b"\xff", b""], pa.binary()),
        "flag": pa.array([True, None, False, True]),
        "d": pa.array([dt.date(2020, 1, 1), None, dt.date(1969, 12, 31), dt.date(2020, 1, 2)]),
        "ts": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 123456), None, dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                        dt.datetime(2020, 1, 1, 0, 0, 0, 123000)], pa.timestamp("us", "UTC")),
        "ntz": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 1), None, dt.datetime(2020, 1, 1), dt.datetime(2021, 1, 1)],
                        pa.timestamp("us")),
        "st": pa.array([{"x": 1, "y": "q"}, None, {"x": None, "y": None}, {"x": 4, "y": "r"}],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "lst": pa.array([[1, 2], None, [], [4]], pa.list_(pa.int32())),
        "mp": pa.array([[("a", 1)], None, [], [("a", 4)]], pa.map_(pa.string(), pa.int32())),
        "p": pa.array(["x", None, "y", "x"]),
        "pi": pa.array([1, None, 2, 1], pa.int32()),
    })
    location = str(path)
    write_deltalake(location, first, partition_by=["p", "pi"])
    extra = first.slice(0, 1).set_column(0, "id", pa.array([6], pa.int64())).append_column("extra", pa.array(["new"]))
    write_deltalake(location, extra, mode="append", schema_mode="merge")
    table = deltalake.DeltaTable(location)
    table.update({"s": "'upd'"}, predicate="id = 1")
    table.optimize.compact()


DELTALAKE_PREDICATES = (
    "id = 1", "i8 < 0", "f32 > 1", "f32 < 0", "dec < 0", "s = 'upd'", f"s = '{'z' * 50}'", "s IS NULL",
    "b = X'FF'", "flag IS NULL", "d < DATE'1970-01-01'", "ts = TIMESTAMP'2020-01-01 00:00:00.123456'",
    "ts > TIMESTAMP'2020-01-01 00:00:00.123'", "ts = TIMESTAMP'2020-01-01 00:00:00.123'",
    "ts < TIMESTAMP'1970-01-01 00:00:00'", "ntz = TIMESTAMP_NTZ'2020-01-01 00:00:00.000001'",
    "ntz <= TIMESTAMP_NTZ'2020-01-01 00:00:00'", "st.x IS NULL", "st.y = 'q'", "extra = 'new'", "extra IS NULL",
    "p IS NULL", "p = 'x'", "pi = 2", "try_element_at(mp, 'a') = 1",
)

CASES: dict[str, Case] = {
    # Delta on Spark writes TIMESTAMP as INT96; DataFusion (deltalake 1.x) reads INT96 as nanoseconds, so
    # TIMESTAMP'9999-12-31 23:59:59.999999' overflows to 1816-03-30: Delta on Spark reads every version.
    "spark-types": Case(build_spark_types, ("p_str", "p_int"), TYPES_PREDICATES,
                        kernel_misreads="INT96 timestamps after 2262"),
    "spark-name-mapping": Case(build_name_mapping, ("p",), NAME_MAPPING_PREDICATES),
    "spark-id-mapping-compat-v2": Case(build_id_mapping, ("d", "g"), ID_MAPPING_PREDICATES),
    "deltalake": Case(build_deltalake, ("p", "pi"), DELTALAKE_PREDICATES),
}


def convert_every_version(spark: Any, name: str, case: Case, path: Path) -> Converted:
    """Full conversion of version 0, one incremental run to the latest version, then a full re-conversion."""
    first = convert(str(path), version=0)
    assert first.mode == "full" and first.delta_version == 0, first
    incremental = convert(str(path))
    assert incremental.mode == "incremental", incremental
    full = convert(str(path), full=True)
    assert full.mode == "full" and full.delta_version == incremental.delta_version, full
    snapshot_rows = tuple(iceberg_df(spark, full.metadata_location, table="snapshots").collect())
    snapshots: dict[int, int] = {}
    for row in snapshot_rows:
        if row.snapshot_id != full.snapshot_id:
            version = int(row.summary["delta-version"])
            assert version not in snapshots, f"two incremental snapshots of Delta version {version}"
            snapshots[version] = row.snapshot_id
    latest = incremental.delta_version
    assert sorted(snapshots) == list(range(latest + 1)), "not one Iceberg snapshot per Delta version"
    return Converted(name, case, path, full.metadata_location, snapshots, full.snapshot_id, latest, snapshot_rows)


@pytest.fixture(scope="module", params=sorted(CASES))
def converted(request: pytest.FixtureRequest, iceberg_spark: Any,
              tmp_path_factory: pytest.TempPathFactory) -> Converted:
    name = request.param
    case = CASES[name]
    path = tmp_path_factory.mktemp("iceberg-parity") / name
    case.build(iceberg_spark, path)
    return convert_every_version(iceberg_spark, name, case, path)


# -- 1. rows, at every version ----------------------------------------------------------------------------


def test_rows_match_delta_at_every_version(iceberg_spark: Any, converted: Converted) -> None:
    """The versions before the latest as deltalake's kernel reader reads them (its file list: the live files), or
    Delta on Spark where deltalake misreads the table; the latest as Delta on Spark and deltalake both read it, the
    two agreeing."""
    spark, c = iceberg_spark, converted
    summaries = {row.snapshot_id: row.summary for row in c.snapshot_rows}
    versions = sorted(c.snapshots.items())
    latest = delta_df(spark, c.path, c.latest_version)
    earlier = [delta_df(spark, c.path, v) for v, _ in versions[:-1]] if c.case.kernel_misreads else []
    # Each snapshot, then the full re-conversion (the latest snapshot of the table), then Delta on Spark's reads.
    icebergs = [iceberg_df(spark, c.metadata_location, snapshot_id) for _, snapshot_id in versions]
    icebergs.append(iceberg_df(spark, c.metadata_location))
    collected = collect_each([*icebergs, latest, *earlier])
    *ice_rows, full_rows, latest_rows = collected[:len(icebergs) + 1]
    reads = {c.latest_version: spark_read(latest, latest_rows)}
    if earlier:
        earlier_rows = collected[len(icebergs) + 1:]
        reads |= {v: spark_read(df, rows) for (v, _), df, rows in zip(versions[:-1], earlier, earlier_rows,
                                                                       strict=True)}
    else:
        kernel_latest = kernel_read(c.path, c.latest_version)
        assert_kernel_agrees_with_spark(latest, latest_rows, kernel_latest, f"{c.name} version {c.latest_version}")
        assert {local_path(f) for f in kernel_latest.files} == {local_path(f) for f in latest.inputFiles()}, c.name
    for (version, snapshot_id), ice, ice_collected in zip(versions, icebergs[:-1], ice_rows, strict=True):
        what = f"{c.name} Delta version {version} / Iceberg snapshot {snapshot_id}"
        delta = reads[version] if version in reads else kernel_read(c.path, version)
        assert_kernel_rows(ice, delta, what, ice_collected)
        files = {local_path(f) for f in delta.files}
        summary = summaries[snapshot_id]
        assert (int(summary["total-records"]), int(summary["total-data-files"])) == (len(delta.rows), len(files)), what
    assert_same_rows(icebergs[-1], latest, f"{c.name} full re-conversion of version {c.latest_version}",
                     latest_rows, full_rows)


def test_snapshot_lineage(converted: Converted) -> None:
    """``#snapshots`` in table order: Delta versions 0..latest, then the full re-conversion; each the parent of
    the next; commit times never decrease."""
    c = converted
    rows = c.snapshot_rows
    assert [int(r.summary["delta-version"]) for r in rows] == [*range(c.latest_version + 1), c.latest_version]
    assert rows[-1].snapshot_id == c.full_snapshot_id
    assert [r.parent_id for r in rows] == [None, *[r.snapshot_id for r in rows[:-1]]]
    assert all(a.committed_at <= b.committed_at for a, b in zip(rows, rows[1:], strict=False))


# -- 2. filters -------------------------------------------------------------------------------------------


def test_filters_match_delta(iceberg_spark: Any, converted: Converted) -> None:
    """On the incremental snapshot of the latest version (manifests carried over from earlier snapshots and
    rewritten with EXISTING/DELETED entries); the full snapshot's metadata is checked file by file below."""
    spark, c = iceberg_spark, converted
    iceberg = iceberg_df(spark, c.metadata_location, c.snapshots[c.latest_version])
    assert_same_filtered_ids(spark, iceberg, delta_df(spark, c.path), c.case.predicates, c.name)


# -- 3. Iceberg's metadata tables -------------------------------------------------------------------------


def _check_files(c: Converted, snapshot_id: int, files: list[Any], facts: dict[str, dict[str, Any]],
                 leaves: list[tuple[tuple[str, ...], Any]]) -> tuple[list[str], int]:
    """``#files`` of a snapshot against the live files of the latest Delta version and the rows in them: the
    problems found, and how many column bounds were checked."""
    by_path = {local_path(r.file_path): r for r in files}
    assert len(by_path) == len(files), f"{c.name} snapshot {snapshot_id}: a data file listed twice"
    assert set(by_path) == set(facts), f"{c.name} snapshot {snapshot_id}: data files differ from Delta's live files"
    index = {path: i for i, (path, _) in enumerate(leaves)}
    problems: list[str] = []
    bounds = 0
    for path, row in sorted(by_path.items()):
        fact = facts[path]
        if (row.content, row.file_format) != (0, "PARQUET"):
            problems.append(f"{path}: content {row.content}, format {row.file_format}")
        if row.record_count != fact["n"]:
            problems.append(f"{path}: record_count {row.record_count}, rows read by Delta {fact['n']}")
        if row.file_size_in_bytes != os.path.getsize(path):
            problems.append(f"{path}: file_size_in_bytes {row.file_size_in_bytes} != {os.path.getsize(path)}")
        partition = row.partition.asDict() if row.partition is not None else {}
        if sorted(partition) != sorted(c.case.partition_columns):
            problems.append(f"{path}: partition fields {sorted(partition)}")
        for column, value in partition.items():
            i = index[(column,)]
            lo, hi, nulls = fact[f"lo{i}"], fact[f"hi{i}"], fact[f"nulls{i}"]
            expected = None if nulls == fact["n"] else lo
            if nulls not in (0, fact["n"]) or lo != hi or normal(value) != normal(expected):
                problems.append(f"{path}: partition {column}={value!r}, Delta rows have {lo!r}..{hi!r}, {nulls} null")
        metrics = row.readable_metrics.asDict()
        for i, (leaf, _) in enumerate(leaves):
            key = ".".join(leaf)
            m = metrics.get(key)
            if m is None:
                problems.append(f"{path}: no readable_metrics for {key}")
                continue
            lo, hi, nulls = fact[f"lo{i}"], fact[f"hi{i}"], fact[f"nulls{i}"]
            if m.null_value_count is not None and m.null_value_count != nulls:
                problems.append(f"{path}: {key} null_value_count {m.null_value_count}, Delta rows have {nulls}")
            if m.value_count is not None and m.value_count != fact["n"]:
                problems.append(f"{path}: {key} value_count {m.value_count}, Delta rows {fact['n']}")
            for name, bound, holds in (("lower", m.lower_bound, lo is not None and m.lower_bound is not None
                                        and m.lower_bound <= lo),
                                       ("upper", m.upper_bound, hi is not None and m.upper_bound is not None
                                        and m.upper_bound >= hi)):
                if bound is None:
                    continue
                bounds += 1
                if isinstance(bound, float) and math.isnan(bound):
                    problems.append(f"{path}: {key} {name} bound is NaN")
                elif lo is None:
                    problems.append(f"{path}: {key} has a {name} bound {bound!r} but no non-null, non-NaN value")
                elif not holds:
                    problems.append(f"{path}: {key} {name} bound {bound!r} does not hold for {lo!r}..{hi!r}")
    return problems, bounds


def _check_manifests(c: Converted, snapshot_id: int, manifests: list[Any], files: list[Any]) -> None:
    what = f"{c.name} snapshot {snapshot_id}"
    assert all(m.content == 0 for m in manifests), what
    assert sum(m.added_data_files_count + m.existing_data_files_count for m in manifests) == len(files), what
    assert all(len(m.partition_summaries) == len(c.case.partition_columns) for m in manifests), what
    for i, column in enumerate(c.case.partition_columns):
        has_null = any(f.partition[column] is None for f in files)
        live = [m for m in manifests if m.added_data_files_count + m.existing_data_files_count]
        # Manifests claiming no nulls while a file has a null partition value would be pruned by IS NULL filters.
        assert any(m.partition_summaries[i].contains_null for m in live) == has_null, f"{what}: {column}"


def _check_partitions(spark: Any, c: Converted, facts: dict[str, dict[str, Any]],
                      leaves: list[tuple[tuple[str, ...], Any]]) -> None:
    """``#partitions`` (records and files per partition) against Delta's rows grouped by partition: summed from
    the rows per file of ``facts`` (each file holds one partition value: _check_files checked lo == hi)."""
    columns = list(c.case.partition_columns)
    index = {path: i for i, (path, _) in enumerate(leaves)}
    expected: dict[Any, tuple[int, int]] = {}
    for fact in facts.values():
        key = normal(tuple(fact[f"lo{index[(col,)]}"] for col in columns))
        records, files = expected.get(key, (0, 0))
        expected[key] = (records + fact["n"], files + 1)
    actual = {
        normal(tuple(row.partition[col] for col in columns)): (row.record_count, row.file_count)
        for row in iceberg_df(spark, c.metadata_location, table="partitions").collect()
    }
    assert actual == expected, f"{c.name}: #partitions"


def test_metadata_tables_agree_with_the_data(iceberg_spark: Any, converted: Converted) -> None:
    spark, c = iceberg_spark, converted
    delta = delta_df(spark, c.path)
    leaves = list(leaf_columns(delta.schema))
    facts = facts_per_file(spark, delta, leaves)
    problems = []
    snapshot_ids = (c.snapshots[c.latest_version], c.full_snapshot_id)
    files_each = collect_rows_each([iceberg_df(spark, c.metadata_location, s, "files") for s in snapshot_ids])
    manifests_each = collect_rows_each([iceberg_df(spark, c.metadata_location, s, "manifests") for s in snapshot_ids])
    for snapshot_id, files, manifests in zip(snapshot_ids, files_each, manifests_each, strict=True):
        found, bounds = _check_files(c, snapshot_id, files, facts, leaves)
        assert bounds > 0, f"{c.name} snapshot {snapshot_id}: no column bounds at all"
        problems += [f"snapshot {snapshot_id}: {p}" for p in found]
        _check_manifests(c, snapshot_id, manifests, files)
    assert not problems, f"{c.name}:\n" + "\n".join(problems)
    _check_partitions(spark, c, facts, leaves)


# -- 2b. aggregates answered from the metadata (Iceberg's aggregate push-down) ----------------------------


@pytest.fixture(scope="module")
def aggregates_table(iceberg_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """No nulls and two files, so that Iceberg answers min/max/count from the bounds of every file alone."""
    path = tmp_path_factory.mktemp("iceberg-parity") / "aggregates"
    run_sql(
        iceberg_spark, path,
        f"CREATE TABLE @ USING delta TBLPROPERTIES ({NO_DV}) AS SELECT /*+ COALESCE(1) */ * FROM VALUES "
        """(1, 10000000000L, CAST(1234567890123456.7891 AS DECIMAL(20,4)), DATE'2020-01-01', 1.5D, 1.5F, 'a',
         TIMESTAMP'2020-01-01 00:00:00.123456', TIMESTAMP_NTZ'2020-01-01 00:00:00.000001',
         named_struct('t', TIMESTAMP'2020-01-01 00:00:00.000001')),
        (2, -5L, -1BD, DATE'1969-12-31', -2.5D, -2.5F, 'b', TIMESTAMP'2020-01-01 00:00:00.5',
         TIMESTAMP_NTZ'2020-01-01 00:00:00.5', named_struct('t', TIMESTAMP'2020-01-01 00:00:00.5'))
        AS t(id, l, dec, d, dbl, f, s, ts, ntz, st)""",
        """INSERT INTO @ VALUES (3, 7L, 0.0001BD, DATE'2021-01-01', 100.25D, 100.25F, 'c',
        TIMESTAMP'2019-12-31 23:59:59.999999', TIMESTAMP_NTZ'2019-12-31 23:59:59.999999',
        named_struct('t', TIMESTAMP'2030-01-01 00:00:00.999001'))""",
    )
    return path, convert(str(path)).metadata_location


def _aggregates(spark: Any, df: Any, columns: tuple[str, ...]) -> tuple[dict[str, tuple[Any, ...]], str]:
    """count(*), min and max per column (one UNION ALL branch per column: each is pushed down on its own), and the
    physical plan."""
    with temp_views(spark, parity_aggregated=df):
        query = " UNION ALL ".join(
            f"SELECT '{c}' AS col, count(*) AS n, CAST(min({c}) AS STRING) AS lo, CAST(max({c}) AS STRING) AS hi "
            f"FROM parity_aggregated" for c in columns
        )
        result = spark.sql(query)
        plan = result._jdf.queryExecution().executedPlan().toString()
        return {row.col: (row.n, row.lo, row.hi) for row in result.collect()}, plan


def _delta_aggregates(spark: Any, df: Any, columns: tuple[str, ...]) -> dict[str, tuple[Any, ...]]:
    with temp_views(spark, parity_aggregated=df):
        exprs = ", ".join(f"CAST(min({c}) AS STRING), CAST(max({c}) AS STRING)" for c in columns)
        row = spark.sql(f"SELECT count(*), {exprs} FROM parity_aggregated").collect()[0]
    return {c: (row[0], row[1 + 2 * i], row[2 + 2 * i]) for i, c in enumerate(columns)}


def test_pushed_down_aggregates_match_delta(iceberg_spark: Any, aggregates_table: tuple[Path, str]) -> None:
    """Types whose Delta stats are exact (and strings, which Iceberg does not answer from truncated bounds)."""
    path, location = aggregates_table
    columns = ("id", "l", "dec", "d", "dbl", "f", "s")
    iceberg, plan = _aggregates(iceberg_spark, iceberg_df(iceberg_spark, location), columns)
    assert iceberg == _delta_aggregates(iceberg_spark, delta_df(iceberg_spark, path), columns)
    # Iceberg answered (some of) them from the metadata: a local scan of its results, no data file read.
    assert "LocalTableScan" in plan, plan


def test_pushed_down_timestamp_aggregates_match_delta(iceberg_spark: Any,
                                                      aggregates_table: tuple[Path, str]) -> None:
    path, location = aggregates_table
    columns = ("ts", "ntz", "st.t")
    iceberg, _ = _aggregates(iceberg_spark, iceberg_df(iceberg_spark, location), columns)
    assert iceberg == _delta_aggregates(iceberg_spark, delta_df(iceberg_spark, path), columns)


# -- special floating point values ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def floats_table(iceberg_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """NaN, infinities and -0.0 (Delta writes "NaN" as a string in its stats), with a high-precision decimal and
    a timestamp in the same file; -0.0 alone in a second file."""
    path = tmp_path_factory.mktemp("iceberg-parity") / "floats"
    run_sql(
        iceberg_spark, path,
        f"CREATE TABLE @ USING delta TBLPROPERTIES ({NO_DV}) AS SELECT /*+ COALESCE(1) */ * FROM VALUES "
        """(1, CAST('NaN' AS FLOAT), CAST('NaN' AS DOUBLE), CAST(12345678901234567890.0123456789 AS DECIMAL(38,10)),
         TIMESTAMP'2020-01-01 00:00:00.123456'),
        (2, CAST('Infinity' AS FLOAT), CAST('-Infinity' AS DOUBLE), -1.5BD, TIMESTAMP'2020-01-01 00:00:00.5'),
        (3, 1.5F, 2.5D, NULL, NULL)
        AS t(id, f, dbl, dec, ts)""",
        "INSERT INTO @ VALUES (4, CAST('-0.0' AS FLOAT), CAST('-0.0' AS DOUBLE), 0BD, NULL)",
    )
    return path, convert(str(path)).metadata_location


def test_special_floats_rows_and_filters(iceberg_spark: Any, floats_table: tuple[Path, str]) -> None:
    path, location = floats_table
    iceberg, delta = iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path)
    assert_same_rows(iceberg, delta, "floats")
    assert_same_filtered_ids(iceberg_spark, iceberg, delta, (
        "isnan(f)", "isnan(dbl)", "NOT isnan(dbl)", "f > 3e38", "f = CAST('Infinity' AS FLOAT)", "dbl < -1e308",
        "dbl = CAST('-Infinity' AS DOUBLE)", "dbl > 2", "f < 2", "dbl IS NULL", "dec = -1.5", "dec IS NULL",
        "ts = TIMESTAMP'2020-01-01 00:00:00.123456'",
    ), "floats")


def test_decimal_bounds_survive_nan_stats(iceberg_spark: Any, floats_table: tuple[Path, str]) -> None:
    path, location = floats_table
    assert_same_filtered_ids(iceberg_spark, iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path), (
        "dec = 12345678901234567890.0123456789", "dec > 12345678901234567000",
    ), "floats")


def test_negative_zero_matches_zero(iceberg_spark: Any, floats_table: tuple[Path, str]) -> None:
    path, location = floats_table
    assert_same_filtered_ids(iceberg_spark, iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path), (
        "dbl = 0.0", "f = 0.0", "dbl >= 0",
    ), "floats")


# -- known differences ------------------------------------------------------------------------------------


def assert_every_version_matches(spark: Any, path: Path, location: str) -> None:
    """Each snapshot against its Delta version as deltalake's kernel reader reads it; the latest version read by
    Delta on Spark as well, the two agreeing."""
    snapshots = [(row.snapshot_id, int(row.summary["delta-version"]))
                 for row in iceberg_df(spark, location, table="snapshots").collect()]
    icebergs = [iceberg_df(spark, location, snapshot_id) for snapshot_id, _ in snapshots]
    latest = max(version for _, version in snapshots)
    spark_latest = delta_df(spark, path, latest)
    *ice_rows, spark_rows = collect_each([*icebergs, spark_latest])
    # Each version read once (a full re-conversion repeats one).
    deltas = {version: kernel_read(path, version) for version in sorted({v for _, v in snapshots})}
    assert_kernel_agrees_with_spark(spark_latest, spark_rows, deltas[latest], f"Delta version {latest}")
    for (snapshot_id, version), iceberg, ice_collected in zip(snapshots, icebergs, ice_rows, strict=True):
        assert_kernel_rows(iceberg, deltas[version], f"Delta version {version} / Iceberg snapshot {snapshot_id}",
                           ice_collected)


@pytest.fixture(scope="module")
def mapped_table(iceberg_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Column mapping mode name without IcebergCompat: lists and maps of structs (no nested ids); two commits
    converted one at a time."""
    path = tmp_path_factory.mktemp("iceberg-parity") / "mapped"
    run_sql(
        iceberg_spark, path,
        "CREATE TABLE @ (id INT, arrs ARRAY<STRUCT<e: INT>>, ms MAP<STRING, STRUCT<v: INT>>) "
        f"USING delta TBLPROPERTIES ({NO_DV}, 'delta.columnMapping.mode' = 'name')",
        "INSERT INTO @ VALUES (1, array(named_struct('e', 1)), map('k', named_struct('v', 1))), (2, NULL, NULL)",
        "INSERT INTO @ VALUES (3, array(), map())",
    )
    convert(str(path), version=1)
    return path, convert(str(path)).metadata_location


def test_mapped_nested_structs_match_delta(iceberg_spark: Any, mapped_table: tuple[Path, str]) -> None:
    """Lists and maps of structs read fine under column mapping without nested ids (their leaves carry field
    ids, map keys are read by position)."""
    path, location = mapped_table
    assert_same_rows(iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path), "mapped")


@pytest.mark.parametrize(("column", "error"), [
    # Iceberg has no char type: Delta on Spark pads CHAR values on read, Iceberg would return them unpadded.
    ("c CHAR(3)", "is char\\(3\\), which Delta on Spark pads"),
    # Files under column mapping carry no field ids on list elements or map values without nested ids: Iceberg
    # Java fails ('[col-..., list, element] optional int32 element is not in the store').
    ("arr ARRAY<INT>", "list or map of primitives under column mapping"),
    ("m MAP<STRING, INT>", "list or map of primitives under column mapping"),
])
def test_columns_iceberg_cannot_read_like_delta_are_refused(iceberg_spark: Any, tmp_path: Path, column: str,
                                                            error: str) -> None:
    path = tmp_path / "refused"
    run_sql(iceberg_spark, path, f"CREATE TABLE @ (id INT, {column}) USING delta "
                                 f"TBLPROPERTIES ({NO_DV}, 'delta.columnMapping.mode' = 'name')")
    with pytest.raises(UnsupportedTypeError, match=error):
        convert(str(path))
    assert not (path / "_iceberg").exists()


def test_unchanged_schema_keeps_its_iceberg_schema(mapped_table: tuple[Path, str]) -> None:
    _, location = mapped_table
    metadata = json.loads(Path(location).read_text())
    assert [s["schema-id"] for s in metadata["snapshots"]] == [0, 0], metadata["schemas"]


def test_column_mapping_enabled_after_conversion(iceberg_spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "upgraded"
    run_sql(iceberg_spark, path,
            f"CREATE TABLE @ USING delta PARTITIONED BY (p) TBLPROPERTIES ({NO_DV}) AS "
            "SELECT 1 AS id, map('k', named_struct('v', 1)) AS ms, 'x' AS p")
    convert(str(path))
    # An append before the upgrade: the same run publishes its snapshot, then falls back to a full conversion.
    run_sql(iceberg_spark, path, "INSERT INTO @ VALUES (3, map('k', named_struct('v', 3)), 'x')",
            UPGRADE_TO_NAME_MAPPING, "INSERT INTO @ VALUES (2, map('k', named_struct('v', 2)), 'y')")
    result = convert(str(path))
    assert result.mode == "full" and result.snapshots_written == 2
    assert_every_version_matches(iceberg_spark, path, result.metadata_location)


def test_commit_times_going_backwards(iceberg_spark: Any, tmp_path: Path) -> None:
    """Commit file times that go backwards (legal in Delta) give snapshot times in order: Iceberg Java refuses a
    snapshot log that is not ("[BUG] Expected sorted snapshot log entries")."""
    path = tmp_path / "backwards"
    run_sql(iceberg_spark, path, f"CREATE TABLE @ (id INT, p STRING) USING delta TBLPROPERTIES ({NO_DV})",
            "INSERT INTO @ VALUES (1, 'a')", "INSERT INTO @ VALUES (2, 'b')", "DELETE FROM @ WHERE id = 1")
    # Days ago, within the week Delta on Spark lets a reader travel back (delta.deletedFileRetentionDuration).
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    for version, days_ago in enumerate((2, 3, 1, 4)):
        seconds = now - days_ago * 86_400
        os.utime(path / "_delta_log" / f"{version:020d}.json", (seconds, seconds))
    convert(str(path), version=0)
    location = convert(str(path)).metadata_location
    assert_every_version_matches(iceberg_spark, path, location)
    history = iceberg_df(iceberg_spark, location, table="history").orderBy("made_current_at").collect()
    assert len(history) == 4


def test_dropped_column_stays_dropped_after_column_mapping_upgrade(iceberg_spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "readded"
    run_sql(iceberg_spark, path,
            f"CREATE TABLE @ USING delta TBLPROPERTIES ({NO_DV}) AS SELECT 1 AS id, 'old' AS a",
            UPGRADE_TO_NAME_MAPPING, "ALTER TABLE @ DROP COLUMN a", "ALTER TABLE @ ADD COLUMN (a STRING)")
    location = convert(str(path)).metadata_location
    assert_same_rows(iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path), "readded")


def test_partitioning_changed_by_replace(iceberg_spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "replaced"
    run_sql(iceberg_spark, path,
            f"CREATE TABLE @ USING delta PARTITIONED BY (a) TBLPROPERTIES ({NO_DV}) AS "
            "SELECT * FROM VALUES (1, 'x', 10), (2, NULL, 20) AS t(id, a, b)")
    convert(str(path))
    run_sql(iceberg_spark, path,
            f"CREATE OR REPLACE TABLE @ USING delta PARTITIONED BY (b) TBLPROPERTIES ({NO_DV}) AS "
            "SELECT * FROM VALUES (3, 'y', 30), (4, 'z', NULL) AS t(id, a, b)")
    result = convert(str(path))
    assert_same_rows(iceberg_df(iceberg_spark, result.metadata_location), delta_df(iceberg_spark, path), "replaced")
    # CREATE OR REPLACE gives the table a new metaData.id, and the Iceberg table uuid derives from it: the
    # conversion starts a new Iceberg history (docs/ARCHITECTURE.md, Identity), holding the new table's files only.
    assert any("new Iceberg history" in w for w in result.warnings)
    assert iceberg_df(iceberg_spark, result.metadata_location, table="all_data_files").count() == 2


def test_date_like_partition_values_of_files_with_tags(iceberg_spark: Any, tmp_path: Path) -> None:
    """Files with tags (IcebergCompat writes ICEBERG_COMPAT_VERSION on each) used to switch the log reader to JSON
    type inference, which turned string partition values like '2020-01-01' into '2020-01-01 00:00:00'."""
    path = tmp_path / "tagged"
    run_sql(iceberg_spark, path,
            "CREATE TABLE @ USING delta PARTITIONED BY (s) "
            f"TBLPROPERTIES ({NO_DV}, 'delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true') "
            "AS SELECT * FROM VALUES (1, '2020-01-01'), (2, '1969-12-31') AS t(id, s)")
    location = convert(str(path)).metadata_location
    assert_same_rows(iceberg_df(iceberg_spark, location), delta_df(iceberg_spark, path), "tagged")


def _readding_commits(path: Path) -> list[int]:
    """Versions whose commit adds files without removing any, all with dataChange=false."""
    found = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        adds = [a["add"] for a in actions if "add" in a]
        if adds and not any("remove" in a for a in actions) and not any(a["dataChange"] for a in adds):
            found.append(int(commit.name.split(".")[0]))
    return found


def test_live_files_added_again_by_a_row_tracking_backfill(iceberg_spark: Any, tmp_path: Path) -> None:
    """Enabling row tracking on an existing table backfills row ids: Delta re-adds every live file without removing
    it (the newest add of a path replaces the older one). An incremental conversion keeps each file once."""
    statement = "ALTER TABLE @ SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')"
    path = tmp_path / "readded"
    run_sql(iceberg_spark, path, f"CREATE TABLE @ (id INT, p STRING) USING delta TBLPROPERTIES ({NO_DV})",
            "INSERT INTO @ VALUES (1, 'a'), (2, 'b')", "INSERT INTO @ VALUES (3, 'a')")
    convert(str(path))
    converted = max(int(c.name.split(".")[0]) for c in (path / "_delta_log").glob("*.json"))
    run_sql(iceberg_spark, path, statement, "INSERT INTO @ VALUES (4, 'c')")
    assert [v for v in _readding_commits(path) if v > converted], "Delta wrote no commit re-adding live files"
    result = convert(str(path))
    assert result.mode == "incremental"
    assert_every_version_matches(iceberg_spark, path, result.metadata_location)
