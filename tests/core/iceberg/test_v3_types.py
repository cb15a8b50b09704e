"""Delta types only Iceberg v3 holds (variant, geometry, geography): their Iceberg types at format version 3, a
typed error naming the column at 2, null counts but no bounds. Iceberg Java reads them back in
tests/spark/test_v3_types.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg import types as it

from airflow_deltaberg.core.delta.schema import parse_schema
from airflow_deltaberg.core.errors import UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.metrics import file_metrics, stat_columns
from airflow_deltaberg.core.iceberg.publish import metadata_file_version, read_current_schema
from airflow_deltaberg.core.iceberg.schema import (
    VECTORIZATION_PROPERTY,
    VariantType,
    convert_schema,
    parse_table_metadata,
)
from airflow_deltaberg.core.storage import open_storage


def _schema(*fields: tuple[str, object]) -> object:
    return parse_schema(json.dumps({"type": "struct", "fields": [
        {"name": name, "type": type_, "nullable": True, "metadata": {}} for name, type_ in fields]}))


V3_FIELDS = (
    ("id", "long"),
    ("v", "variant"),
    ("vs", {"type": "array", "elementType": "variant", "containsNull": True}),
    ("shape", "geometry(OGC:CRS84)"),
    ("place", "geography(OGC:CRS84, spherical)"),
    ("local", "geometry(EPSG:4326)"),
)


def test_v3_types_at_format_version_3() -> None:
    converted = convert_schema(_schema(*V3_FIELDS), "none", table="t", format_version=3)
    s = converted.schema
    assert isinstance(s.find_type("v"), VariantType)
    assert isinstance(s.find_field("vs").field_type.element_type, VariantType)
    assert s.find_type("shape") == it.GeometryType()
    assert s.find_type("place") == it.GeographyType("OGC:CRS84", "spherical")
    assert s.find_type("local") == it.GeometryType("EPSG:4326")
    as_json = json.loads(s.model_dump_json())
    assert [f["type"] for f in as_json["fields"]][1:3] == ["variant", {"type": "list", "element-id": 4,
                                                                     "element": "variant", "element-required": False}]
    assert as_json["fields"][3]["type"] == "geometry"
    assert converted.properties[VECTORIZATION_PROPERTY] == "false"


def test_no_vectorization_property_without_variants() -> None:
    converted = convert_schema(_schema(("id", "long"), ("shape", "geometry(OGC:CRS84)")), "none", table="t",
                               format_version=3)
    assert VECTORIZATION_PROPERTY not in converted.properties


@pytest.mark.parametrize(("fields", "column"), [
    ((("id", "long"), ("v", "variant")), "v"),
    ((("vs", {"type": "array", "elementType": "variant", "containsNull": True}),), "vs.element"),
    ((("s", {"type": "struct", "fields": [{"name": "g", "type": "geography(OGC:CRS84)", "nullable": True,
                                           "metadata": {}}]}),), "s.g"),
])
def test_v3_types_are_refused_at_format_version_2(fields: tuple, column: str) -> None:
    with pytest.raises(UnsupportedTypeError, match=rf"column {column} has type \S+, which Iceberg v2 cannot "
                                                   r"represent \(table t\).*--format-version 3"):
        convert_schema(_schema(*fields), "none", table="t")


def test_void_is_still_refused_at_format_version_3() -> None:
    with pytest.raises(UnsupportedTypeError, match="column n has type void, which Iceberg v3 cannot represent"):
        convert_schema(_schema(("n", "void")), "none", table="t", format_version=3)


def test_variant_and_geo_columns_get_null_counts_and_no_bounds() -> None:
    delta = _schema(("id", "long"), ("v", "variant"), ("shape", "geometry(OGC:CRS84)"))
    converted = convert_schema(delta, "none", table="t", format_version=3)
    stats = pa.array([{"numRecords": 2, "tightBounds": True, "nullCount": {"id": 0, "v": 1, "shape": 2},
                       "minValues": {"id": 1}, "maxValues": {"id": 2}}])
    metrics = file_metrics(stats, stat_columns(delta, converted.schema, False), 32)
    assert metrics.null_value_counts.to_pylist() == [{"1": 0, "2": 1, "3": 2}]
    assert metrics.lower_bounds.type.names == ["1"] and metrics.upper_bounds.type.names == ["1"]


def test_variant_fixture_converts_at_v3_and_is_refused_at_v2(copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("unshredded-variant")
    with pytest.raises(UnsupportedTypeError, match="column v has type variant"):
        convert(str(path))
    assert not (path / "_iceberg").exists()  # nothing written
    result = convert(str(path), format_version=3)
    metadata = json.loads(Path(result.metadata_location).read_text())
    assert metadata["format-version"] == 3
    assert {f["name"]: f["type"] for f in metadata["schemas"][0]["fields"]}["v"] == "variant"
    assert result.records == 102


def test_later_conversions_read_metadata_with_variants(copy_fixture: Callable[[str], Path]) -> None:
    """Regression: pyiceberg 0.12 has no variant type, so the next conversion failed parsing the published
    metadata (unexpected ValidationError)."""
    path = copy_fixture("unshredded-variant")
    first = convert(str(path), format_version=3)
    again = convert(str(path))  # incremental: up to date, reads the published metadata
    assert again.snapshots_written == 0 and again.snapshot_id == first.snapshot_id
    full = convert(str(path), full=True)
    assert full.snapshots_written == 1 and full.records == 102
    raw = Path(full.metadata_location).read_bytes()
    metadata = parse_table_metadata(raw)
    assert metadata.format_version == 3 and len(metadata.schemas) == 2
    for schema in metadata.schemas:
        assert isinstance(schema.find_type("v"), VariantType)
        assert isinstance(schema.find_field("array_of_variants").field_type.element_type, VariantType)
        assert isinstance(schema.find_field("map_of_variants").field_type.value_type, VariantType)
        assert isinstance(schema.find_type("struct_of_array_of_variants.v").element_type, VariantType)
    written = json.loads(raw)["schemas"][-1]["fields"]
    assert [f["type"] for f in written][1] == "variant"
    # The current schema alone (what the OpenLineage schema facet reads) is the same schema, variants included.
    version = metadata_file_version(Path(full.metadata_location).name)
    assert version is not None
    assert read_current_schema(open_storage(str(path)), version) == metadata.schema()
