"""The Spark rewrite path of enabling IcebergWriterCompatV1 (airflow_deltaberg.spark.enable_rewrite), on real
tables written by deltalake and a Delta on Spark fixture with deletion vectors.

After the rewrite and its commit, our validator passes at writer-compat-v1 with data checks, and deltalake and
Delta on Spark read the rows they read before. Delta on Spark 4.4.0 refuses to write to an
IcebergWriterCompatV1 table (it has no such writer feature; see test_delta_parity.py): the append after the
enable goes through Delta Kernel 4.4.0 on the same JVM instead, and Spark reads it. A concurrent commit between
the read and the commit, and a failure just before the commit, leave the table as they found it. The application
file through a real spark-submit (its command line, result document and commit) is proved by the submission of
tests/operators/test_enable_operator.py, which runs it anyway.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import QueryBuilder, write_deltalake
from support.compat_parity import refused
from support.kernel_tables import kernel_append

from airflow_deltaberg.core.compat.validate import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CommitConflictError
from airflow_deltaberg.spark.enable_rewrite import run_rewrite

pytestmark = pytest.mark.spark

FIELD_ID = b"PARQUET:field_id"
UTC = dt.UTC


# -- helpers ----------------------------------------------------------------------------------------------


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted JSON strings (order-insensitive; maps as deltalake returns them: lists of pairs)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def deltalake_rows(path: Path) -> list[str]:
    """The rows deltalake reads, through its DataFusion reader: its pyarrow reader refuses a reader-version-3
    protocol listing columnMapping (deltalake 1.6), which the enabled tables have."""
    result = QueryBuilder().register("t", DeltaLakeTable(str(path))).execute("SELECT * FROM t").read_all()
    return _canonical(pa.table(result).to_pylist())


def _spark_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _spark_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_spark_value(v) for v in value]
    return value


def spark_rows(spark: Any, path: Path, version: int | None = None) -> list[str]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return _canonical([_spark_value(r.asDict(recursive=True)) for r in reader.load(str(path)).collect()])


def log_state(path: Path) -> dict[str, bytes]:
    """Every file of the log with its bytes."""
    log = path / "_delta_log"
    return {p.name: p.read_bytes() for p in sorted(log.iterdir()) if p.is_file()}


def data_files(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


def assert_writer_compat(path: Path) -> None:
    report = validate(str(path), "writer-compat-v1", data_checks=True)
    assert report.violations == (), report.to_text()


def commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def assert_rewrite_commit(path: Path, version: int, old_files: int, result: Any) -> None:
    """One commit: protocol and metaData, a remove per old file and an add per new one, all dataChange=false;
    every new file carries the column ids as parquet field ids (nested ones too) under col-<id> names."""
    actions = commit_actions(path, version)
    kinds = [next(iter(a)) for a in actions]
    assert kinds[:3] == ["commitInfo", "protocol", "metaData"]
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(removes) == old_files == result.files_removed
    assert len(adds) == result.files_added
    assert not any(a["dataChange"] for a in removes + adds)
    snapshot = DeltaTable(str(path)).snapshot(version)
    expected_ids = {f.physical_name: f.column_mapping_id for _, f in snapshot.schema.walk()}
    for add in adds:
        assert json.loads(add["stats"])["numRecords"] > 0
        schema = pq.read_schema(path / add["path"])
        for name in schema.names:
            assert int(schema.field(name).metadata[FIELD_ID]) == expected_ids[name] and name.startswith("col-")


# -- tables -----------------------------------------------------------------------------------------------

NESTED = pa.table({
    "id": pa.array([1, 2, 3, 4], pa.int64()),
    "name": ["a", None, "c" * 40, "d"],
    "tags": pa.array([["x", "y"], [], None, ["z"]], pa.list_(pa.string())),
    "attrs": pa.array([[("k", 1)], [], None, [("a", 2), ("b", None)]], pa.map_(pa.string(), pa.int32())),
    "st": pa.array([{"a": 1, "b": 2.5}, None, {"a": None, "b": float("nan")}, {"a": 4, "b": -1.0}],
                   pa.struct([("a", pa.int32()), ("b", pa.float64())])),
    "ts": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC), None,
                    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                    dt.datetime(2024, 6, 1, tzinfo=UTC)], pa.timestamp("us", "UTC")),
    "amount": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.10"), decimal.Decimal("0.00")],
                       pa.decimal128(10, 2)),
    "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), None, dt.date(1999, 12, 31)], pa.date32()),
})


def plain_table(path: Path) -> None:
    """No column mapping; nested types; two commits (two files)."""
    write_deltalake(str(path), NESTED.slice(0, 2))
    write_deltalake(str(path), NESTED.slice(2), mode="append")


def partitioned_table(path: Path) -> None:
    """Two partition columns (one of them a date, with a null partition value), files without them."""
    data = pa.table({"id": [1, 2, 3, 4, 5], "p": ["A", "A", "B", None, "B"],
                     "day": pa.array([dt.date(2024, 1, 1)] * 3 + [None, dt.date(2024, 1, 2)], pa.date32()),
                     "v": [1.5, 2.5, None, 4.5, 5.5]})
    write_deltalake(str(path), data, partition_by=["p", "day"])


def name_mode_table(path: Path) -> None:
    """Column mapping name mode (deltalake's col-<uuid> physical names), nested types, two files."""
    config = {"delta.columnMapping.mode": "name"}
    write_deltalake(str(path), NESTED.slice(0, 3), configuration=config)
    write_deltalake(str(path), NESTED.slice(3), mode="append")


def byte_short_table(path: Path) -> None:
    data = pa.table({"b": pa.array([-128, 0, 127, None], pa.int8()), "s": pa.array([-32768, 1, 32767, 5], pa.int16()),
                     "id": pa.array([1, 2, 3, 4], pa.int64())})
    write_deltalake(str(path), data)


def empty_table(path: Path) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array([], pa.int64()), "s": pa.array([], pa.string())}))


TABLES: dict[str, Callable[[Path], None]] = {
    "no-column-mapping": plain_table,
    "partitioned": partitioned_table,
    "name-mode": name_mode_table,
    "byte-short": byte_short_table,
    "empty": empty_table,
}


# -- tests ------------------------------------------------------------------------------------------------


#: Filters whose answers depend on the new files' stats being true bounds: Delta on Spark skips files by them (a
#: timestamp maximum truncated to milliseconds, a string longer than the stats prefix, a float column with NaN).
SKIPPING_FILTERS = ("ts >= '2024-01-01 12:00:00.123456'", f"name = '{'c' * 40}'", "st.b > 2", "amount < 0")


def filtered_counts(spark: Any, path: Path) -> list[int]:
    df = spark.read.format("delta").load(str(path))
    return [df.where(f).count() for f in SKIPPING_FILTERS]


#: Tables whose rows Spark reads before and after too (the nested types); the others are read by deltalake only,
#: to keep the Spark time down (the partitioned case is read by Spark in the append test).
SPARK_CHECKED = {"no-column-mapping", "name-mode"}


@pytest.mark.parametrize("kind", list(TABLES))
def test_rewrite_keeps_rows_and_passes_the_validator(spark: Any, tmp_path: Path, kind: str) -> None:
    path = tmp_path / kind
    TABLES[kind](path)
    read_version = DeltaTable(str(path)).latest_version()
    old_files = DeltaTable(str(path)).snapshot().num_files
    before = deltalake_rows(path)
    spark_before = spark_rows(spark, path) if kind in SPARK_CHECKED else None
    counts_before = filtered_counts(spark, path) if kind == "no-column-mapping" else None

    result = run_rewrite(spark, str(path), read_version)

    assert result.version == read_version + 1
    assert result.rows_written == len(before)
    assert_rewrite_commit(path, result.version, old_files, result)
    assert_writer_compat(path)
    assert deltalake_rows(path) == before
    if spark_before is not None:
        assert spark_rows(spark, path) == spark_before
    if counts_before is not None:
        assert all(counts_before)  # each filter matches a row: a wrong bound would lose it
        assert filtered_counts(spark, path) == counts_before


def test_rewrite_applies_deletion_vectors(spark: Any, copy_fixture: Callable[[str], Path]) -> None:
    """A Delta on Spark fixture with deletion vectors (deltalake refuses to read it): after the rewrite no file has
    a deletion vector, and deltalake and Spark read the rows Spark read before."""
    path = copy_fixture("table-with-dv-small")
    snapshot = DeltaTable(str(path)).snapshot()
    assert snapshot.files.column("deletionVector").null_count < snapshot.num_files
    before = spark_rows(spark, path)
    assert len(before) == snapshot.num_records

    result = run_rewrite(spark, str(path), snapshot.version)

    assert_rewrite_commit(path, result.version, snapshot.num_files, result)
    removes = [a["remove"] for a in commit_actions(path, result.version) if "remove" in a]
    assert all("deletionVector" in r for r in removes)  # a logical file is its path and its deletion vector
    after = DeltaTable(str(path)).snapshot()
    assert after.files.column("deletionVector").null_count == after.num_files
    assert_writer_compat(path)
    assert spark_rows(spark, path) == before
    assert deltalake_rows(path) == before


def test_spark_reads_and_kernel_appends_after_the_rewrite(spark: Any, kernel: Any, tmp_path: Path) -> None:
    """Spark reads the enabled (partitioned) table; Spark 4.4.0 cannot write it, Delta Kernel appends; the
    validator still passes and Spark and deltalake read old and new rows."""
    path = tmp_path / "appended"
    write_deltalake(str(path), pa.table({"id": [1, 2, 3], "p": ["A", "B", None], "v": [1.5, None, 3.5]}),
                    partition_by=["p"])
    before = spark_rows(spark, path)
    result = run_rewrite(spark, str(path), 0)
    assert spark_rows(spark, path) == before

    refused(lambda: spark.sql(f"INSERT INTO delta.`{path}` SELECT * FROM delta.`{path}`").collect(),
            "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", "icebergWriterCompatV1")
    row = {"id": 4, "p": "C", "v": 4.5}
    assert kernel_append(kernel, path, [row], {"p": "C"}) == result.version + 1
    assert_writer_compat(path)
    expected = _canonical([json.loads(r) for r in before] + [row])
    assert spark_rows(spark, path) == expected
    assert deltalake_rows(path) == expected


def test_concurrent_commit_makes_the_rewrite_fail(spark: Any, tmp_path: Path) -> None:
    """deltalake appends after the version the rewrite read: the commit is refused with CommitConflictError,
    the log is byte for byte the one the other writer left, and the rewritten files are gone."""
    path = tmp_path / "raced"
    plain_table(path)
    read_version = DeltaTable(str(path)).latest_version()
    write_deltalake(str(path), NESTED.slice(0, 1), mode="append")
    log, rows, files = log_state(path), deltalake_rows(path), data_files(path)

    with pytest.raises(CommitConflictError) as caught:
        run_rewrite(spark, str(path), read_version)

    assert caught.value.version == read_version + 1 and caught.value.table == str(path)
    assert log_state(path) == log
    assert deltalake_rows(path) == rows
    assert data_files(path) == files


def test_failure_before_the_commit_leaves_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    """An exception after the files are written and before the commit: the log is unchanged, the new files
    were written (seen by the hook) and are deleted again."""
    path = tmp_path / "crashed"
    byte_short_table(path)
    log, rows, files = log_state(path), deltalake_rows(path), data_files(path)
    seen: list[str] = []

    def crash(actions: Any) -> None:
        seen.extend(a["add"]["path"] for a in actions if "add" in a)
        assert all((path / p).is_file() for p in seen)
        raise RuntimeError("injected crash before the commit")

    with pytest.raises(RuntimeError, match="injected crash"):
        run_rewrite(spark, str(path), 0, before_commit=crash)

    assert seen
    assert log_state(path) == log
    assert deltalake_rows(path) == rows
    assert data_files(path) == files

