"""The schema facet's columns, in process: an Iceberg metadata file read through the project's reader gives the
types as the file spells them (nested structs with their fields, lists and maps by kind), and a Delta schema the
operator holds gives its columns without reading the log."""

from __future__ import annotations

import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.openlineage.schemas import Column, delta_columns, iceberg_columns


def spelled(field: dict[str, Any]) -> Column:
    """A column as the metadata file's JSON spells it."""
    kind = field["type"]
    if isinstance(kind, str):
        return Column(field["name"], kind)
    nested = tuple(spelled(f) for f in kind["fields"]) if kind["type"] == "struct" else ()
    return Column(field["name"], kind["type"], nested)


@pytest.fixture
def nested_table(tmp_path: Path) -> Path:
    path = tmp_path / "nested"
    data = pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "price": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(10, 2)),
        "at": pa.array([1_700_000_000_000_000, None], pa.timestamp("us", tz="UTC")),
        "point": pa.array([{"x": 1.0, "tag": "a"}, None], pa.struct([("x", pa.float64()), ("tag", pa.string())])),
        "tags": pa.array([["a"], []], pa.list_(pa.string())),
        "attrs": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int32())),
    })
    write_deltalake(str(path), data)
    return path


def test_iceberg_columns_are_spelled_as_the_metadata_file(nested_table: Path) -> None:
    result = convert(str(nested_table))
    document = json.loads(Path(result.metadata_location).read_text())
    schema = next(s for s in document["schemas"] if s["schema-id"] == document["current-schema-id"])

    columns = iceberg_columns(result.table, result.metadata_location, None)

    assert columns == tuple(spelled(f) for f in schema["fields"])
    assert columns == (
        Column("id", "long"), Column("price", "decimal(10, 2)"), Column("at", "timestamptz"),
        Column("point", "struct", (Column("x", "double"), Column("tag", "string"))),
        Column("tags", "list"), Column("attrs", "map"))


def test_a_metadata_file_of_another_table_is_refused(nested_table: Path, tmp_path: Path) -> None:
    result = convert(str(nested_table))
    with pytest.raises(ValueError, match="not an Iceberg metadata file of"):
        iceberg_columns(str(tmp_path / "other"), result.metadata_location, None)


def test_delta_columns_of_the_schema_held_or_its_string(nested_table: Path) -> None:
    snapshot = DeltaTable(str(nested_table)).snapshot()

    columns = delta_columns(snapshot.schema)

    assert columns == delta_columns(snapshot.metadata.schema_string)
    assert columns == (
        Column("id", "long"), Column("price", "decimal(10,2)"), Column("at", "timestamp"),
        Column("point", "struct", (Column("x", "double"), Column("tag", "string"))),
        Column("tags", "array"), Column("attrs", "map"))
