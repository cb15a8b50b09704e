"""The schema facet's columns, in process: the current schema of an Iceberg metadata file gives the types as the
file spells them (nested structs with their fields, lists and maps by kind; a damaged file a typed error naming the
table and file), and a Delta schema the operator holds gives its columns without reading the log."""

from __future__ import annotations

import decimal
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import IcebergMetadataError
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
    other = str(tmp_path / "other")
    with pytest.raises(IcebergMetadataError, match="not an Iceberg metadata file of this table") as caught:
        iceberg_columns(other, result.metadata_location, None)
    assert (caught.value.table, caught.value.file) == (other, result.metadata_location)


def test_only_the_current_schema_is_parsed(nested_table: Path) -> None:
    """Snapshots, specs and logs the schema facet does not need are not parsed: garbage there changes nothing."""
    result = convert(str(nested_table))
    path = Path(result.metadata_location)
    expected = iceberg_columns(result.table, result.metadata_location, None)
    document = json.loads(path.read_text())
    document.update({"snapshots": "garbage", "partition-specs": 7, "snapshot-log": None})
    path.write_text(json.dumps(document))

    assert iceberg_columns(result.table, result.metadata_location, None) == expected


def _damage_not_json(document: dict[str, Any]) -> str:
    return json.dumps(document)[:200]


def _damage_current_schema_id(document: dict[str, Any]) -> str:
    return json.dumps({**document, "current-schema-id": 99})


def _damage_field_type(document: dict[str, Any]) -> str:
    for schema in document["schemas"]:
        schema["fields"][0]["type"] = "no-such-type"
    return json.dumps(document)


def _damage_format_version(document: dict[str, Any]) -> str:
    return json.dumps({**document, "format-version": 1})


@pytest.mark.parametrize(("damage", "message"), [
    (_damage_not_json, "is not JSON"),
    (_damage_current_schema_id, "has no schema with its current-schema-id 99"),
    (_damage_field_type, "has a current schema that does not parse"),
    (_damage_format_version, "is not Iceberg format version 2 or 3"),
])
def test_a_damaged_metadata_file_gives_the_typed_error(nested_table: Path, damage: Callable[[dict[str, Any]], str],
                                                       message: str) -> None:
    result = convert(str(nested_table))
    path = Path(result.metadata_location)
    path.write_text(damage(json.loads(path.read_text())))

    with pytest.raises(IcebergMetadataError, match=message) as caught:
        iceberg_columns(result.table, result.metadata_location, None)
    assert (caught.value.table, caught.value.file) == (result.table, result.metadata_location)
    assert str(caught.value).endswith(f"(table {result.table}, file {result.metadata_location})")


def test_variant_columns_of_a_v3_table(copy_fixture: Callable[[str], Path]) -> None:
    result = convert(str(copy_fixture("unshredded-variant")), format_version=3)

    columns = {c.name: c for c in iceberg_columns(result.table, result.metadata_location, None)}

    assert columns["v"] == Column("v", "variant")
    assert columns["array_of_variants"] == Column("array_of_variants", "list")


def test_delta_columns_of_the_schema_held_or_its_string(nested_table: Path) -> None:
    snapshot = DeltaTable(str(nested_table)).snapshot()

    columns = delta_columns(snapshot.schema)

    assert columns == delta_columns(snapshot.metadata.schema_string)
    assert columns == (
        Column("id", "long"), Column("price", "decimal(10,2)"), Column("at", "timestamp"),
        Column("point", "struct", (Column("x", "double"), Column("tag", "string"))),
        Column("tags", "array"), Column("attrs", "map"))
