"""Enabled tables read by Delta on Spark, and `deltaberg enable` taking the rewrite path from a shell (in this
process: the command reuses the active SparkSession, the test run's one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.tables import id_mode_table, rows_of

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable

pytestmark = pytest.mark.spark


def spark_rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    rows = [r.asDict(recursive=True) for r in spark.read.format("delta").load(str(path)).collect()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_spark_reads_a_metadata_only_enabled_table(spark: Any, tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    before = spark_rows(spark, path)
    assert main(["enable", str(path), "--mode", "metadata_only"]) == 0
    assert validate(str(path), data_checks=True).compliant
    assert spark_rows(spark, path) == before
    assert [r["id"] for r in before] == [1, 2, 3]


def test_shell_rewrite_with_a_local_spark(spark: Any, deltalake_table: Callable[..., Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "small": pa.array([1, None, -3, 4], pa.int16()),
                     "tags": pa.array([["a"], None, [], ["b", "c"]], pa.list_(pa.string())),
                     "part": ["x", "y", "x", None]})
    path = deltalake_table("t", data=data, partition_by=["part"], appends=1)
    before = rows_of(path)
    capsys.readouterr()
    assert main(["enable", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["action"] == "rewrite" and doc["committed_version"] == 2
    assert doc["plan"]["reasons"][0].startswith("no-column-mapping")
    report = validate(str(path), data_checks=True)
    assert report.compliant, report.to_text()
    assert rows_of(path) == before
    assert spark_rows(spark, path) == sorted(before, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    assert DeltaTable(str(path)).snapshot().schema.field("small").type.name == "integer"


def test_forced_rewrite_of_a_table_that_needs_none(spark: Any, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = id_mode_table(tmp_path / "t")
    before = rows_of(path)
    old_files = set(DeltaTable(str(path)).snapshot().files.column("path").to_pylist())
    capsys.readouterr()
    assert main(["enable", str(path), "--mode", "rewrite", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "rewrite"
    assert validate(str(path), data_checks=True).compliant
    assert rows_of(path) == before
    assert not old_files & set(DeltaTable(str(path)).snapshot().files.column("path").to_pylist())
