"""Enabled tables read by Delta on Spark, and `deltaberg enable` taking the rewrite path from a shell (in this
process: the command reuses the active SparkSession, the test run's one)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.cli import DELTABERG
from support.spark_session import pyspark_submit_args, python_without_zips
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


def test_shell_enable_uses_the_fetched_jars_not_ivy(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    """`deltaberg enable` from a shell (its own process and JVM) with a ~/.m2 that holds Delta's pom but not its
    jar - where Spark's Ivy resolution fails with JAVA_GATEWAY_EXITED: the local Spark takes the jars
    scripts/fetch_jars.sh fetched, never asks Ivy (no ~/.ivy2 appears), and the enable rewrites the table."""
    home = tmp_path / "home"
    pom_dir = home / ".m2/repository/io/delta/delta-spark_4.1_2.13/4.4.0"
    pom_dir.mkdir(parents=True)
    (pom_dir / "delta-spark_4.1_2.13-4.4.0.pom").write_text(
        "<project><modelVersion>4.0.0</modelVersion><groupId>io.delta</groupId>"
        "<artifactId>delta-spark_4.1_2.13</artifactId><version>4.4.0</version></project>")
    path = deltalake_table("t", data=pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", None]}))
    before = rows_of(path)
    env = {**os.environ, "HOME": str(home), "PYSPARK_PYTHON": python_without_zips(),
           "PYSPARK_SUBMIT_ARGS": pyspark_submit_args()}  # the tests' JVM options
    env.pop("DELTABERG_SPARK_PACKAGES", None)
    env.pop("DELTABERG_SPARK_JARS", None)
    result = subprocess.run([DELTABERG, "enable", str(path), "--format", "json"], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["action"] == "rewrite"
    assert "ivy" not in result.stderr.lower()
    assert not (home / ".ivy2").exists() and not (home / ".ivy2.5.2").exists()
    assert rows_of(path) == before
    assert validate(str(path), data_checks=True).compliant
