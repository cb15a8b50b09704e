"""`deltaberg enable --level compat-v2` (IcebergCompatV2 with column mapping), then Delta on Spark 4.4 appends to
the table: the validator still passes at compat-v2, and the converter gives Iceberg readers (pyiceberg) Delta's
rows, the Spark append included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from support.oracle import assert_same_rows, delta_arrow
from support.tables import commit_lines, rows_of

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark


def test_spark_appends_after_a_compat_v2_enable_and_iceberg_reads_it(spark: Any,
                                                                     deltalake_table: Callable[..., Path]) -> None:
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "small": pa.array([1, None, -3], pa.int16()),
                     "tags": pa.array([["a"], None, []], pa.list_(pa.string())), "part": ["x", "y", "x"]})
    path = deltalake_table("t", data=data, partition_by=["part"])
    before = rows_of(path)
    assert main(["enable", str(path), "--level", "compat-v2"]) == 0
    snapshot = DeltaTable(str(path)).snapshot()
    assert snapshot.version == 1 and snapshot.metadata.bool_property("delta.enableIcebergCompatV2")
    assert "icebergWriterCompatV1" not in snapshot.protocol.effective_writer_features
    assert snapshot.schema.field("small").type.name == "short"  # IcebergCompatV2 keeps short
    assert rows_of(path) == before
    report = validate(str(path), "compat-v2", data_checks=True)
    assert report.compliant, report.to_text()
    first = convert(str(path))
    assert_same_rows(StaticTable.from_metadata(first.metadata_location).scan().to_arrow(), delta_arrow(path)[0],
                     "compat-v2 table right after the enable")

    spark.sql(f"INSERT INTO delta.`{path}` VALUES (10, CAST(7 AS SMALLINT), array('z', 'w'), 'y')")
    appended = DeltaTable(str(path)).snapshot()
    assert appended.version == 2 and appended.num_records == 4
    info = next(a["commitInfo"] for a in commit_lines(path, 2) if "commitInfo" in a)
    assert info["engineInfo"].startswith("Apache-Spark") and "Delta-Lake/4.4.0" in info["engineInfo"]
    report = validate(str(path), "compat-v2", data_checks=True)
    assert report.compliant, report.to_text()

    result = convert(str(path))  # incremental: one more Iceberg snapshot with Spark's file
    iceberg = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    delta, _ = delta_arrow(path)
    assert delta.num_rows == 4 and 10 in delta.column("id").to_pylist()
    assert_same_rows(iceberg, delta, "compat-v2 table after a Spark append")


def test_compat_v2_rewrite_keeps_name_mode_physical_names(spark: Any, deltalake_table: Callable[..., Path]) -> None:
    """A partitioned name-mode table (partition values not in the files: a rewrite) keeps its physical names at
    compat-v2; Delta on Spark appends afterwards and the validator passes."""
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", None, "c"], "part": ["x", "y", "x"]})
    path = deltalake_table("t", data=data, partition_by=["part"], configuration={"delta.columnMapping.mode": "name"})
    names = {f.name: f.physical_name for f in DeltaTable(str(path)).snapshot().schema.fields}
    before = rows_of(path)
    assert main(["enable", str(path), "--level", "compat-v2", "--mode", "rewrite"]) == 0
    snapshot = DeltaTable(str(path)).snapshot()
    assert snapshot.column_mapping_mode == "name"
    assert {f.name: f.physical_name for f in snapshot.schema.fields} == names
    assert rows_of(path) == before
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (4, 'd', 'y')")
    report = validate(str(path), "compat-v2", data_checks=True)
    assert report.compliant, report.to_text()
    assert [r["id"] for r in rows_of(path)] == [1, 2, 3, 4]
