"""Delta types only Iceberg v3 holds, converted with ``format_version=3`` and read back by Iceberg Java (Spark with
the Iceberg 1.12 runtime) row for row against Delta on Spark; at format version 2 they are refused, naming the
column, and nothing is written under ``_iceberg``.

- variant: the Spark fixture ``unshredded-variant`` (variants at the top level, in arrays, structs, maps, arrays
  of structs and structs of arrays) and a table Delta on Spark writes with shredded variants (Parquet's shredded
  layout: metadata, value and typed_value). Iceberg Java's row reader reads Delta's shredded files as written;
  its vectorized reader (Spark's default) refuses them ("Unsupported variant: shredded typed_value primitive"),
  so tables with a variant get ``read.parquet.vectorization.enabled=false`` and read with Spark's defaults.
- timestamp_ntz stays Iceberg ``timestamp`` (microseconds, as at v2): Delta has no nanosecond type.
- geometry/geography: the ``table-with-geo`` fixture (no data files) converts to Iceberg ``geometry``/``geography``
  and Iceberg Java loads its schema; Delta on Spark 4.4 has geospatial disabled, so no rows are compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.errors import UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark


def _json_rows(df: Any) -> list[str]:
    """Every row as JSON (variants rendered by to_json), sorted."""
    columns = [f"to_json(named_struct({', '.join(f'{c!r}, `{c}`' for c in df.columns)})) AS j"]
    return sorted(r.j for r in df.selectExpr(*columns).collect())


def _assert_same_rows(spark: Any, path: Path, metadata_location: str) -> int:
    iceberg = spark.read.format("iceberg").load(metadata_location)
    delta = spark.read.format("delta").load(str(path))
    assert iceberg.columns == delta.columns
    assert [f.dataType.simpleString() for f in iceberg.schema.fields] == [
        f.dataType.simpleString() for f in delta.schema.fields]
    ours, theirs = _json_rows(iceberg), _json_rows(delta)
    assert ours == theirs
    return len(ours)


def test_unshredded_variants_read_back_through_iceberg_java(iceberg_spark: Any,
                                                            copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("unshredded-variant")
    result = convert(str(path), format_version=3)
    metadata = json.loads(Path(result.metadata_location).read_text())
    fields = {f["name"]: f["type"] for f in metadata["schemas"][-1]["fields"]}
    assert fields["v"] == "variant"
    assert fields["array_of_variants"]["element"] == "variant"
    assert fields["map_of_variants"]["value"] == "variant"
    assert _assert_same_rows(iceberg_spark, path, result.metadata_location) == 102
    # no bounds for variants: only id (field 1) has them
    files = iceberg_spark.read.format("iceberg").load(f"{result.metadata_location}#files")
    bounds = {k for r in files.select("lower_bounds").collect() for k in (r.lower_bounds or {})}
    assert bounds == {1}
    # a full re-conversion on top of the published metadata (parsed with its variants) reads the same
    again = convert(str(path), full=True)
    assert again.snapshots_written == 1
    assert _assert_same_rows(iceberg_spark, path, again.metadata_location) == 102


def test_variants_through_the_spark_engine(iceberg_spark: Any, copy_fixture: Callable[[str], Path]) -> None:
    """Spark executors write the manifests of a variant table (the plan with its VariantType travels to them)."""
    from airflow_deltaberg.spark.manifest_engine import SparkManifestEngine

    path = copy_fixture("unshredded-variant")
    result = convert(str(path), format_version=3, manifest_engine=SparkManifestEngine(iceberg_spark))
    assert _assert_same_rows(iceberg_spark, path, result.metadata_location) == 102


def test_variants_are_refused_at_format_version_2(copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("unshredded-variant")
    with pytest.raises(UnsupportedTypeError, match=r"column v has type variant, which Iceberg v2 cannot represent.*"
                                                   r"--format-version 3"):
        convert(str(path))
    assert not (path / "_iceberg").exists()


def test_shredded_variants_read_back_through_iceberg_java(iceberg_spark: Any, tmp_path: Path) -> None:
    spark = iceberg_spark
    path = tmp_path / "shredded"
    conf = {"spark.sql.variant.writeShredding.enabled": "true",
            "spark.sql.variant.forceShreddingSchemaForTest": "a int, b string"}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, v VARIANT) USING delta "
                  "TBLPROPERTIES ('delta.enableVariantShredding' = 'true')")
        spark.sql(f"INSERT INTO delta.`{path}` SELECT /*+ REPARTITION(1) */ id, parse_json(j) FROM VALUES "
                  "(1, '{\"a\": 1, \"b\": \"x\"}'), (2, '{\"a\": \"not an int\", \"c\": [1, 2]}'), (3, '42'), "
                  "(4, 'null'), (5, NULL) AS t(id, j)")
    finally:
        for key in conf:
            spark.conf.unset(key)
    [data_file] = [p for p in path.rglob("*.parquet")]
    v = pq.read_schema(data_file).field("v").type
    assert "typed_value" in [v.field(i).name for i in range(v.num_fields)]  # really shredded
    result = convert(str(path), format_version=3)
    properties = json.loads(Path(result.metadata_location).read_text())["properties"]
    assert properties["read.parquet.vectorization.enabled"] == "false"
    assert _assert_same_rows(spark, path, result.metadata_location) == 5
    # Why the property: Iceberg's vectorized reader cannot read the shredded layout.
    vectorized = spark.read.format("iceberg").option("vectorization-enabled", "true").load(result.metadata_location)
    with pytest.raises(Exception, match="Unsupported variant: shredded typed_value"):
        vectorized.collect()


def test_timestamp_ntz_stays_microseconds_at_v3(iceberg_spark: Any, copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("data-reader-timestamp_ntz")
    result = convert(str(path), format_version=3)
    metadata = json.loads(Path(result.metadata_location).read_text())
    types = {f["name"]: f["type"] for f in metadata["schemas"][-1]["fields"]}
    assert "timestamp" in types.values() and "timestamp_ns" not in types.values()
    assert _assert_same_rows(iceberg_spark, path, result.metadata_location) > 0


def test_geospatial_types_convert_at_v3(iceberg_spark: Any, copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("table-with-geo")
    with pytest.raises(UnsupportedTypeError, match="which Iceberg v2 cannot represent"):
        convert(str(path))
    result = convert(str(path), format_version=3)
    metadata = json.loads(Path(result.metadata_location).read_text())
    types = sorted(str(f["type"]) for f in metadata["schemas"][-1]["fields"])
    assert any(t.startswith("geometry") for t in types) or any(t.startswith("geography") for t in types), types
    # Spark 4.1 has geospatial types disabled (UNSUPPORTED_FEATURE.GEOSPATIAL_DISABLED): Iceberg Java's own API
    # loads the table and parses the types instead.
    jvm = iceberg_spark._jvm
    tables = jvm.org.apache.iceberg.hadoop.HadoopTables(iceberg_spark._jsc.hadoopConfiguration())
    table = tables.load(str(path / "_iceberg"))
    schema = table.schema()
    assert schema.findType("geom").toString() == "geometry(OGC:CRS84)"
    assert schema.findType("geog").toString() == "geography(OGC:CRS84, spherical)"
    assert table.currentSnapshot().summary().get("total-records") == "0"
