"""History that stays readable, read by Iceberg Java (Spark with the Iceberg 1.12 runtime): every snapshot a
conversion keeps after VACUUM, after an overwrite with another schema and after a RESTORE past an added column
reads as deltalake reads its Delta version; a double -> string overwrite's ``all_data_files`` readable_metrics
decode. pyiceberg's side: tests/core/iceberg/test_history.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.history_tables import retained_versions, vacuumed_history
from support.oracle import kernel_arrow

from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark


def _normal(value: Any) -> Any:
    return "<NaN>" if isinstance(value, float) and math.isnan(value) else value


def java_rows(spark: Any, location: str, snapshot_id: int) -> list[tuple[Any, ...]]:
    df = spark.read.format("iceberg").option("versionAsOf", snapshot_id).load(location)
    columns = sorted(df.columns)
    return sorted((tuple(_normal(row[c]) for c in columns) for row in df.collect()), key=repr)


def delta_rows_at(path: Path, version: int) -> list[tuple[Any, ...]]:
    table = kernel_arrow(path, version)
    columns = sorted(table.column_names)
    return sorted((tuple(_normal(row[c]) for c in columns) for row in table.to_pylist()), key=repr)


def assert_java_reads_every_snapshot(spark: Any, path: Path, location: str) -> list[int]:
    kept = retained_versions(location)
    for version, snapshot_id in kept.items():
        assert java_rows(spark, location, snapshot_id) == delta_rows_at(path, version), f"version {version}"
    return sorted(kept)


def test_after_vacuum_iceberg_java_reads_every_retained_snapshot(iceberg_spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "vacuumed"
    vacuumed_history(path)
    result = convert(str(path), retain_snapshots=10)
    kept = assert_java_reads_every_snapshot(iceberg_spark, path, result.metadata_location)
    assert [v for v in kept if v <= 4] == [3, 4]  # later ones: deltalake's VACUUM START/END commits


def test_earlier_schemas_read_by_name_in_iceberg_java(iceberg_spark: Any, tmp_path: Path) -> None:
    """An overwrite with another schema, then (on another table) a restore past an added column."""
    path = tmp_path / "overwritten"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    convert(str(path))
    other = pa.table({"key": pa.array([7], pa.int32()), "amount": [1.5]})
    write_deltalake(str(path), other, mode="overwrite", schema_mode="overwrite")
    result = convert(str(path))
    assert assert_java_reads_every_snapshot(iceberg_spark, path, result.metadata_location) == [0, 1]

    path = tmp_path / "restored"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    convert(str(path))
    write_deltalake(str(path), pa.table({"id": pa.array([3], pa.int64()), "extra": [3.5]}), mode="append",
                    schema_mode="merge")
    convert(str(path))
    deltalake.DeltaTable(str(path)).restore(0)
    result = convert(str(path))
    assert assert_java_reads_every_snapshot(iceberg_spark, path, result.metadata_location) == [0, 1, 2]


def test_a_double_to_string_overwrite_keeps_readable_metrics_decodable(iceberg_spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "retyped"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64()), "x": [1.5, 2.5]}))
    convert(str(path))
    write_deltalake(str(path), pa.table({"id": pa.array([3], pa.int64()), "x": ["three"]}), mode="overwrite",
                    schema_mode="overwrite")
    result = convert(str(path))
    files = iceberg_spark.read.format("iceberg").load(f"{result.metadata_location}#all_data_files")
    metrics = [row.readable_metrics.asDict(recursive=True) for row in files.select("readable_metrics").collect()]
    assert [m["x"]["lower_bound"] for m in metrics] == ["three"]
    assert assert_java_reads_every_snapshot(iceberg_spark, path, result.metadata_location) == [1]
