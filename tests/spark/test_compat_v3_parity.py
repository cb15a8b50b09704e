"""Parity of the compat-v3 and writer-compat-v3 rules with Delta itself: Delta on Spark 4.4.0 (IcebergCompatV3)
and Delta Kernel 4.4.0 (IcebergWriterCompatV3, io.delta.kernel.internal.icebergcompat) on the same JVM.

a) Tables those jars create at V3 (with arrays, maps, timestamps, a partition, deletion vectors, an UPDATE that
   materializes row ids, a variant column through Kernel) pass our validator with zero violations, data checks
   included.
b) What they refuse: Delta refuses, then we commit the same state onto a valid table made by the same jar (a
   metaData/protocol commit, without Delta's checks), and our validator fails exactly the expected rule ids.

What the jars showed (kept here, not as tests): Delta on Spark enables column mapping (name mode unless asked for
id) and row tracking on its own, lists appendOnly and invariants (legacy, inactive) in writerFeatures, writes the
materialized row id / row commit version columns with field ids 2147483540 / 2147483539; it fails to write a
variant column into a column-mapped table (INVALID_FIELD_NAME ... is not a struct) and has geospatial types
disabled (UNSUPPORTED_FEATURE.GEOSPATIAL_DISABLED), so variant V3 tables are made with Kernel here.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.compat_parity import COMPAT, add_column, assert_compliant, commit_state, failed_rules, refused
from support.kernel_tables import kernel_create
from support.spark_rows import run_sql

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.commit import write_commit

pytestmark = pytest.mark.spark

V3 = "'delta.enableIcebergCompatV3' = 'true'"
WRITER_COMPAT_V3 = "delta.enableIcebergWriterCompatV3"
ROW_ID_FIELD_ID, ROW_VERSION_FIELD_ID = b"2147483540", b"2147483539"


# -- a) what the jars create passes --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["id", "name"])
def test_delta_compat_v3_table_passes(spark: Any, tmp_path: Path, mode: str) -> None:
    path = tmp_path / "v3"
    run_sql(spark, path,
            "CREATE TABLE @ (id BIGINT, name STRING, tags ARRAY<STRING>, m MAP<STRING, INT>, ts TIMESTAMP, "
            f"ntz TIMESTAMP_NTZ, p STRING) USING delta PARTITIONED BY (p) TBLPROPERTIES ({V3}, "
            f"'delta.columnMapping.mode' = '{mode}', 'delta.enableDeletionVectors' = 'true')",
            "INSERT INTO @ SELECT /*+ REPARTITION(1) */ * FROM VALUES (1, 'a', array('x'), map('k', 1), "
            "TIMESTAMP'2024-01-01 00:00:00', TIMESTAMP_NTZ'2024-01-01 00:00:00', 'A'), "
            "(2, 'b', array(), map(), NULL, NULL, 'B'), (3, NULL, NULL, NULL, NULL, NULL, 'A'), "
            "(4, 'd', array('y', 'z'), map('j', 2), NULL, NULL, 'A')",
            "DELETE FROM @ WHERE id = 3", "UPDATE @ SET name = 'z' WHERE id = 2")
    snap = DeltaTable(str(path)).snapshot()
    assert {"icebergCompatV3", "rowTracking", "deletionVectors"} <= snap.protocol.effective_writer_features
    assert snap.files.column("deletionVector").null_count < snap.files.num_rows  # the DELETE wrote a DV
    report = assert_compliant(path, "compat-v3")
    assert "data.row-tracking-field-ids" in report.rules_checked
    # the UPDATE materialized the row ids: the rule had something to look at
    row_id = snap.metadata.configuration["delta.rowTracking.materializedRowIdColumnName"]
    ids = [(f.metadata or {}).get(b"PARQUET:field_id") for p in path.rglob("*.parquet")
           for f in pq.read_schema(p) if f.name == row_id]
    assert ids and set(ids) == {ROW_ID_FIELD_ID}
    assert failed_rules(path, "compat-v2") >= {"protocol.feature.compat-v2", "deletion-vectors.no-live-files"}


def _kernel_types(kernel: Any, *extra: tuple[str, Any]) -> Any:
    t = kernel.types
    schema = (t.StructType().add("id", t.LongType.LONG).add("name", t.StringType.STRING)
              .add("tags", t.ArrayType(t.StringType.STRING, True))
              .add("m", t.MapType(t.StringType.STRING, t.IntegerType.INTEGER, True)))
    for name, type_ in extra:
        schema = schema.add(name, type_)
    return schema


@pytest.mark.parametrize("extra", ["none", "variant", "deletion-vectors"])
def test_kernel_writer_compat_v3_table_passes(kernel: Any, tmp_path: Path, extra: str) -> None:
    path = tmp_path / "wv3"
    properties = {WRITER_COMPAT_V3: "true"}
    columns = _kernel_types(kernel)
    if extra == "variant":
        columns = _kernel_types(kernel, ("v", kernel.types.VariantType.VARIANT))
    if extra == "deletion-vectors":
        properties["delta.enableDeletionVectors"] = "true"
    kernel_create(kernel, path, properties, columns=columns)
    snap = DeltaTable(str(path)).snapshot()
    assert {"icebergCompatV3", "icebergWriterCompatV3", "rowTracking"} <= snap.protocol.effective_writer_features
    for level in ("compat-v3", "writer-compat-v3"):
        report = validate(str(path), level, data_checks=True)
        assert report.violations == (), report.to_text()


# -- b) what the jars refuse, we fail --------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """Delta refuses to create (or alter) a V3 table this way; the same state committed onto a valid table made
    by the same jar fails exactly ``rules`` at ``level``."""

    error: str
    commit: dict[str, Any]
    rules: frozenset[str]
    level: str = "compat-v3"
    add_column: Any = None  # a Delta type (JSON) for a new column x
    column_metadata: dict[str, Any] | None = None  # metadata of the new column x


SPARK_CREATE = "CREATE TABLE @ (id BIGINT, w INT) USING delta TBLPROPERTIES ({V3}, 'delta.columnMapping.mode' = 'id'{})"
SPARK_REFUSALS: dict[str, tuple[str, Refusal]] = {
    "compat-v2-too": (
        ", 'delta.enableIcebergCompatV2' = 'true'",
        Refusal(f"{COMPAT}.VERSION_MUTUAL_EXCLUSIVE",
                {"configuration": {"delta.enableIcebergCompatV2": "true"}, "writer_features": {"icebergCompatV2"}},
                frozenset({"compat.v2-inactive"}))),
    "compat-v1-too": (
        ", 'delta.enableIcebergCompatV1' = 'true'",
        Refusal(f"{COMPAT}.VERSION_MUTUAL_EXCLUSIVE",
                {"configuration": {"delta.enableIcebergCompatV1": "true"}, "writer_features": {"icebergCompatV1"}},
                frozenset({"compat.v1-inactive"}))),
    "row-tracking-off": (
        ", 'delta.enableRowTracking' = 'false'",
        Refusal(f"{COMPAT}.WRONG_REQUIRED_TABLE_PROPERTY", {"configuration": {"delta.enableRowTracking": "false"}},
                frozenset({"row-tracking.enabled"}))),
    "void-column": (
        "",  # the column is added below
        Refusal(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", {}, frozenset({"types.compat-v3-allowlist"}), add_column="void")),
    "default-expression": (
        "",
        Refusal(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", {"writer_features": {"allowColumnDefaults"}},
                frozenset({"defaults.literal"}), add_column="date",
                column_metadata={"CURRENT_DEFAULT": "current_date()"})),
}
SPARK_REFUSED_SQL = {
    "void-column": f"CREATE TABLE @ (id BIGINT, n VOID) USING delta TBLPROPERTIES ({V3})",
    "default-expression": f"CREATE TABLE @ (id BIGINT, d DATE DEFAULT current_date()) USING delta TBLPROPERTIES "
                          f"({V3}, 'delta.feature.allowColumnDefaults' = 'supported')",
}


def _apply(path: Path, spec: Refusal) -> None:
    commit = copy.deepcopy(spec.commit)
    if spec.add_column:
        schema, config = add_column(path, "x", spec.add_column)
        schema["fields"][-1]["metadata"].update(spec.column_metadata or {})
        commit["schema"] = schema
        commit["configuration"] = {**commit.get("configuration", {}), **config}
    commit_state(path, **commit)


@pytest.fixture(scope="module")
def spark_v3_table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The valid V3 table Delta on Spark makes (SPARK_CREATE, two rows), written once; each test changes a copy."""
    path = tmp_path_factory.mktemp("spark-v3") / "valid"
    run_sql(spark, path, SPARK_CREATE.format("", V3=V3), "INSERT INTO @ VALUES (1, 1), (2, NULL)")
    return path


@pytest.mark.parametrize("case", sorted(SPARK_REFUSALS))
def test_delta_refuses_v3_and_we_fail_the_same_state(spark: Any, spark_v3_table: Path, tmp_path: Path,
                                                     case: str) -> None:
    extra, spec = SPARK_REFUSALS[case]
    statement = SPARK_REFUSED_SQL.get(case) or SPARK_CREATE.format(extra, V3=V3)
    refused(lambda: run_sql(spark, tmp_path / "refused", statement), spec.error)
    path = Path(shutil.copytree(spark_v3_table, tmp_path / "offending"))
    assert failed_rules(path, spec.level) == set()
    _apply(path, spec)
    assert failed_rules(path, spec.level) == spec.rules


def test_delta_refuses_a_widening_iceberg_cannot_express(spark: Any, tmp_path: Path) -> None:
    """Delta widens int -> double elsewhere, not under IcebergCompatV3; int -> long passes both."""
    path = tmp_path / "widened"
    run_sql(spark, path, SPARK_CREATE.format(", 'delta.enableTypeWidening' = 'true'", V3=V3))
    refused(lambda: run_sql(spark, path, "ALTER TABLE @ ALTER COLUMN w TYPE DOUBLE"),
            f"{COMPAT}.UNSUPPORTED_TYPE_WIDENING")
    run_sql(spark, path, "ALTER TABLE @ ALTER COLUMN w TYPE BIGINT")
    assert failed_rules(path, "compat-v3") == set()
    schema = json.loads(DeltaTable(str(path)).snapshot().metadata.schema_string)
    w = next(f for f in schema["fields"] if f["name"] == "w")
    assert w["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    w["type"] = "double"
    w["metadata"]["delta.typeChanges"].append({"fromType": "long", "toType": "double"})
    commit_state(path, schema=schema)
    assert failed_rules(path, "compat-v3") == {"types.widening-allowlist"}


KERNEL_REFUSALS: dict[str, Refusal] = {
    "byte-column": Refusal("does not support the data types: [byte]", {}, frozenset({"types.no-byte-short"}),
                           level="writer-compat-v3", add_column="byte"),
    "name-mode": Refusal("'delta.columnMapping.mode' is not compatible with icebergWriterCompatV3",
                         {"configuration": {"delta.columnMapping.mode": "name"}},
                         frozenset({"column-mapping.id-mode"}), level="writer-compat-v3"),
    "change-data-feed": Refusal("[changeDataFeed] are incompatible with icebergWriterCompatV3",
                                {"configuration": {"delta.enableChangeDataFeed": "true"},
                                 "writer_features": {"changeDataFeed"}},
                                frozenset({"disallowed.change-data-feed"}), level="writer-compat-v3"),
    "row-tracking-off": Refusal("'delta.enableRowTracking' is not compatible with icebergCompatV3",
                                {"configuration": {"delta.enableRowTracking": "false"}},
                                frozenset({"row-tracking.enabled"}), level="writer-compat-v3"),
    "compat-v2-too": Refusal("Incompatible version enabled: delta.enableIcebergCompatV2",
                             {"configuration": {"delta.enableIcebergCompatV2": "true"},
                              "writer_features": {"icebergCompatV2"}},
                             frozenset({"compat.v2-inactive"}), level="writer-compat-v3"),
    "compat-v3-off": Refusal("'delta.enableIcebergCompatV3' is not compatible with icebergWriterCompatV3",
                             {"configuration": {"delta.enableIcebergCompatV3": "false"}},
                             frozenset({"property.enable-compat-v3"}), level="writer-compat-v3"),
}
KERNEL_REFUSED_PROPERTIES = {
    "name-mode": {"delta.columnMapping.mode": "name"},
    "change-data-feed": {"delta.enableChangeDataFeed": "true"},
    "row-tracking-off": {"delta.enableRowTracking": "false"},
    "compat-v2-too": {"delta.enableIcebergCompatV2": "true"},
    "compat-v3-off": {"delta.enableIcebergCompatV3": "false"},
}


@pytest.mark.parametrize("case", sorted(KERNEL_REFUSALS))
def test_kernel_refuses_writer_compat_v3_and_we_fail_the_same_state(kernel: Any, tmp_path: Path,
                                                                    case: str) -> None:
    spec = KERNEL_REFUSALS[case]
    columns = _kernel_types(kernel, ("x", kernel.types.ByteType.BYTE)) if case == "byte-column" else None
    refused(lambda: kernel_create(kernel, tmp_path / "refused",
                                  {WRITER_COMPAT_V3: "true", **KERNEL_REFUSED_PROPERTIES.get(case, {})},
                                  columns=columns),
            "io.delta.kernel.exceptions.KernelException", spec.error)
    path = tmp_path / "offending"
    kernel_create(kernel, path, {WRITER_COMPAT_V3: "true"})
    assert failed_rules(path, spec.level) == set()
    _apply(path, spec)
    assert failed_rules(path, spec.level) == spec.rules


def test_kernel_allowlist_mutation(kernel: Any, tmp_path: Path) -> None:
    """A feature outside Kernel's IcebergWriterCompatV3 allowlist (collations, as a writer feature) committed onto a
    Kernel-made table fails only the allowlist rule: compat-v3 itself does not restrict features."""
    path = tmp_path / "offending"
    kernel_create(kernel, path, {WRITER_COMPAT_V3: "true"})
    commit_state(path, writer_features={"collations"})
    assert failed_rules(path, "writer-compat-v3") == {"features.v3-allowlist"}
    assert failed_rules(path, "compat-v3") == set()


def test_kernel_refuses_a_variant_partition_and_we_fail_it(kernel: Any, tmp_path: Path) -> None:
    variant = _kernel_types(kernel, ("v", kernel.types.VariantType.VARIANT))
    refused(lambda: kernel_create(kernel, tmp_path / "refused", {WRITER_COMPAT_V3: "true"}, columns=variant,
                                  partition_columns=("v",)),
            "io.delta.kernel.exceptions.KernelException")
    path = tmp_path / "offending"
    kernel_create(kernel, path, {WRITER_COMPAT_V3: "true"}, columns=variant)
    snap = DeltaTable(str(path)).snapshot()
    metadata = snap.metadata.to_action()
    metadata["partitionColumns"] = ["v"]
    write_commit(DeltaTable(str(path)), [{"metaData": metadata}], read_version=snap.version,
                 operation="SET TBLPROPERTIES")
    assert failed_rules(path, "writer-compat-v3") == {"partitions.primitive-types"}

