"""create_table: version 0 with IcebergWriterCompatV1 on, checked by our validator, deltalake and Delta on Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as PeerTable
from support.tables import commit_lines, log_bytes, rows_of

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.enable.create import create_table
from airflow_deltaberg.core.errors import TableDefinitionError

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("price", pa.decimal128(10, 2)),
    ("ts", pa.timestamp("us", "UTC")),
    ("day", pa.date32()),
    ("tags", pa.list_(pa.string())),
    ("attrs", pa.map_(pa.string(), pa.list_(pa.int32()))),
    ("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    ("part", pa.string()),
])


def test_version_zero_is_writer_compat_v1(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert create_table(str(path), SCHEMA, ["part"], {"delta.appendOnly": "false", "owner": "me"}) == 0
    report = validate(str(path), data_checks=True)
    assert report.compliant, report.to_text()
    lines = commit_lines(path, 0)
    assert [next(iter(line)) for line in lines] == ["commitInfo", "protocol", "metaData"]
    assert lines[0]["commitInfo"]["engineInfo"].startswith("airflow-deltaberg/")
    assert lines[1]["protocol"] == {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
                                    "writerFeatures": ["columnMapping", "icebergCompatV2", "icebergWriterCompatV1"]}
    snap = DeltaTable(str(path)).snapshot()
    assert snap.partition_columns == ("part",)
    config = snap.metadata.configuration
    assert config["delta.columnMapping.mode"] == "id" and config["owner"] == "me"
    assert config["delta.enableIcebergCompatV2"] == config["delta.enableIcebergWriterCompatV1"] == "true"
    ids = [f.column_mapping_id for _, f in snap.schema.walk()]
    assert ids == list(range(1, 12))  # 9 columns and point's x, y
    assert all(f.physical_name == f"col-{f.column_mapping_id}" for _, f in snap.schema.walk())
    attrs = snap.schema.field("attrs")
    assert attrs.metadata["delta.columnMapping.nested.ids"] == {"col-7.key": 13, "col-7.value": 14,
                                                                "col-7.value.element": 15}
    assert snap.schema.field("tags").nested_id(".element") == 12
    assert config["delta.columnMapping.maxColumnId"] == "15"
    # deltalake reads it: the schema and no rows.
    peer = PeerTable(str(path))
    assert [f.name for f in peer.schema().fields] == SCHEMA.names
    assert rows_of(path) == []


@pytest.mark.parametrize("schema", [
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": False, "metadata": {}},
                                  {"name": "ntz", "type": "timestamp_ntz", "nullable": True, "metadata": {}}]},
    json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": False, "metadata": {}},
                                             {"name": "ntz", "type": "timestamp_ntz", "nullable": True,
                                              "metadata": {}}]}),
], ids=["dict", "string"])
def test_delta_schema_json_and_timestamp_ntz(tmp_path: Path, schema: Any) -> None:
    path = tmp_path / "t"
    create_table(str(path), schema, properties={"delta.feature.domainMetadata": "supported"})
    protocol = commit_lines(path, 0)[1]["protocol"]
    assert protocol["readerFeatures"] == ["columnMapping", "timestampNtz"]
    assert protocol["writerFeatures"] == ["columnMapping", "domainMetadata", "icebergCompatV2",
                                          "icebergWriterCompatV1", "timestampNtz"]
    assert "delta.feature.domainMetadata" not in DeltaTable(str(path)).snapshot().metadata.configuration
    assert not DeltaTable(str(path)).snapshot().schema.field("id").nullable
    assert validate(str(path)).compliant


@pytest.mark.parametrize(("schema", "partition_by", "properties", "needle"), [
    (pa.schema([("b", pa.int8())]), (), None, "column b is byte"),
    (pa.schema([("l", pa.list_(pa.int16()))]), (), None, "column l.element is short"),
    (SCHEMA, ("nope",), None, "partition column nope is not in the schema"),
    (SCHEMA, ("tags",), None, "partition column tags must have a primitive type"),
    (SCHEMA, (), {"delta.enableChangeDataFeed": "true"}, "delta.enableChangeDataFeed=true is not allowed"),
    (SCHEMA, (), {"delta.enableDeletionVectors": True}, "delta.enableDeletionVectors=true is not allowed"),
    (SCHEMA, (), {"delta.columnMapping.mode": "name"}, "contradicts IcebergWriterCompatV1"),
    (SCHEMA, (), {"delta.constraints.c": "id > 0"}, "delta.constraints.c cannot be set"),
    (SCHEMA, (), {"delta.feature.rowTracking": "supported"}, "rowTracking is not in the IcebergWriterCompatV1"),
    (pa.schema([]), (), None, "the schema has no columns"),
])
def test_refused_definitions_write_nothing(tmp_path: Path, schema: Any, partition_by: tuple[str, ...],
                                           properties: dict[str, Any] | None, needle: str) -> None:
    path = tmp_path / "t"
    with pytest.raises(TableDefinitionError, match=needle) as info:
        create_table(str(path), schema, partition_by, properties)
    assert info.value.table == str(path)
    assert not (path / "_delta_log").exists()


def test_an_existing_table_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(str(path), SCHEMA)
    before = log_bytes(path)
    with pytest.raises(TableDefinitionError, match="already holds a Delta table") as info:
        create_table(str(path), pa.schema([("other", pa.string())]))
    assert info.value.version == 0
    assert log_bytes(path) == before


# -- Delta on Spark ----------------------------------------------------------------------------------------


@pytest.mark.spark
def test_delta_on_spark_reads_it_and_its_append_support(spark: Any, tmp_path: Path) -> None:
    """Delta on Spark 4.4.0 reads the new table. It cannot append: it does not know the icebergWriterCompatV1
    writer feature (tests/spark/test_delta_parity.py has the same finding for Kernel-created tables), and
    refusing is what the protocol requires of a writer that does not implement a listed writer feature."""
    path = tmp_path / "t"
    create_table(str(path), SCHEMA, ["part"])
    df = spark.read.format("delta").load(str(path))
    assert df.columns == SCHEMA.names
    assert df.count() == 0
    before = log_bytes(path)
    row = spark.createDataFrame([(1, "a", "p")], "id long, name string, part string")
    with pytest.raises(Exception) as info:  # noqa: PT011 - py4j/pyspark raise many types
        row.write.format("delta").mode("append").save(str(path))
    assert "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE" in str(info.value) and "icebergWriterCompatV1" in str(info.value)
    assert log_bytes(path) == before
    assert validate(str(path)).compliant
