"""Parity with Delta itself: what Delta 4.4.0 (on Spark 4.1, and Delta Kernel 4.4.0 on the same JVM) writes,
refuses and reads, against our validator and log engine.

a) Tables that Delta on Spark creates with IcebergCompatV2 (id and name column mapping) or IcebergCompatV1 pass
   our validator at that level, data checks included, with zero violations.
b) IcebergWriterCompatV1. Delta on Spark 4.4.0 cannot create it; what we tried (the first three are tests):
     - TBLPROPERTIES ('delta.enableIcebergWriterCompatV1'='true') -> AnalysisException
       [DELTA_UNKNOWN_CONFIGURATION] Unknown configuration was specified: delta.enableIcebergWriterCompatV1
     - TBLPROPERTIES ('delta.feature.icebergWriterCompatV1'='supported') -> DeltaTableFeatureException
       [DELTA_UNSUPPORTED_FEATURES_IN_CONFIG] ... not recognized by this version of Delta Lake:
       delta.feature.icebergwritercompatv1
     - spark.databricks.delta.allowArbitraryProperties.enabled=true, then the property: the CREATE succeeds, but
       the property is just an unknown string: no icebergWriterCompatV1 feature in the protocol and col-<uuid>
       physical names. Our validator rejects that table (test_spark_escape_hatch_is_not_writer_compat_v1).
     - spark.databricks.delta.properties.defaults.enableIcebergWriterCompatV1=true: silently ignored (the table
       gets IcebergCompatV2 only).
     - the delta-spark 4.4.0 jar has no class, string or error class naming IcebergWriterCompat at all (it has
       IcebergCompatV1/V2/V3 only).
   Delta Kernel 4.4.0 (io.delta:delta-kernel-api / delta-kernel-defaults, driven through py4j) does create
   it: Table.createTransactionBuilder(..., CREATE_TABLE).withTableProperties({delta.enableIcebergWriterCompatV1:
   true}) gives id mode, col-<id> physical names, nested ids and the icebergCompatV2 + icebergWriterCompatV1
   features. Writing rows:
     - Spark refuses: [DELTA_UNSUPPORTED_FEATURES_FOR_WRITE] ... requires writer table feature(s) that are
       unsupported by Delta Lake "4.4.0": icebergWriterCompatV1 (Spark reads the table fine).
     - Kernel's Transaction.transformLogicalData refuses: "Writing into column mapping enabled table is not
       supported yet".
     - GenerateIcebergCompatActionUtils.generateIcebergCompatWriterV1AddAction needs withMaxRetries(0), then
       refuses: "Currently GenerateIcebergCompatActionUtils is not supported for partitioned tables".
     (those two were tried by hand, not kept as tests)
     - What works (used below): build the physical batch ourselves (Kernel's JSON handler parses rows keyed by
       physical name against ColumnMapping.convertToPhysicalSchema, partition column included, i.e.
       materialized), write it with Kernel's ParquetHandler.writeParquetFiles (it writes the field ids and the
       nested element/key/value ids), and commit Transaction.generateAppendActions through Kernel. So the
       parquet files, stats and add actions are Kernel's; only the logical-to-physical renaming is ours.
c) Each rule Delta enforces: Delta refuses, then we produce the same table state without Delta's check (a
   metaData/protocol commit with write_commit, copied from our snapshot), our validator fails it with the
   matching rule id, and Delta, asked to write on that state, refuses it again (where it re-checks).
d) Delta on Spark reads fixture tables: its inputFiles() equals our snapshot's live file set.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from support.compat_parity import COMPAT, add_column, assert_compliant, commit_state, failed_rules, refused
from support.kernel_tables import kernel_append, kernel_create
from support.spark_rows import run_sql

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable

pytestmark = pytest.mark.spark

V1 = "'delta.enableIcebergCompatV1' = 'true'"
V2 = "'delta.enableIcebergCompatV2' = 'true'"
ID = "'delta.columnMapping.mode' = 'id'"
NAME = "'delta.columnMapping.mode' = 'name'"
DV = "'delta.enableDeletionVectors' = 'true'"
WRITER_COMPAT_V1 = "delta.enableIcebergWriterCompatV1"


# -- helpers ----------------------------------------------------------------------------------------------


@contextmanager
def spark_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in conf:
            spark.conf.unset(key)


def our_files(path: Path) -> set[str]:
    """Our snapshot's live files as local paths: the log's (URI-encoded) path decoded once, joined to the root."""
    out = set()
    for p in DeltaTable(str(path)).snapshot().files.column("path").to_pylist():
        local = unquote(p)
        if re.match(r"^[a-z][a-z0-9+.-]*:", local):
            local = re.sub(r"^file:/+", "/", local)
        else:
            local = os.path.join(str(path), local)
        out.add(os.path.normpath(local))
    return out


def spark_files(spark: Any, path: Path) -> set[str]:
    """Spark's inputFiles(): Hadoop Path strings (already decoded, not URIs), ``file:/`` stripped."""
    files = spark.read.format("delta").load(str(path)).inputFiles()
    assert all(f.startswith("file:") for f in files), files
    return {os.path.normpath(re.sub(r"^file:/+", "/", f)) for f in files}


def assert_same_files(spark: Any, path: Path) -> None:
    ours, theirs = our_files(path), spark_files(spark, path)
    assert ours == theirs, f"only ours: {sorted(ours - theirs)}\nonly Spark's: {sorted(theirs - ours)}"
    missing = sorted(f for f in ours if not os.path.isfile(f))
    assert not missing, f"live files that do not exist on disk: {missing}"


def protocol_features(path: Path) -> frozenset[str]:
    return DeltaTable(str(path)).snapshot().protocol.effective_writer_features


# -- a) Delta on Spark's IcebergCompatV2 / V1 tables pass our validator ---------------------------------


@dataclass(frozen=True)
class SparkTable:
    columns: str
    properties: str
    inserts: tuple[str, ...]
    rows: int
    partitioned_by: str = ""

    def create(self, spark: Any, path: Path) -> None:
        partitioning = f" PARTITIONED BY ({self.partitioned_by})" if self.partitioned_by else ""
        run_sql(spark, path, f"CREATE TABLE @ ({self.columns}) USING delta{partitioning} "
                             f"TBLPROPERTIES ({self.properties})", *self.inserts)


PRIMITIVES = SparkTable(
    columns="id BIGINT, name STRING, flag BOOLEAN, tiny TINYINT, small SMALLINT, num INT, score DOUBLE, "
    "ratio FLOAT, amount DECIMAL(12,2), big DECIMAL(38,10), raw BINARY, ts TIMESTAMP, ts_ntz TIMESTAMP_NTZ, "
    "day DATE, region STRING, dt DATE",
    partitioned_by="region, dt",
    properties=f"{V2}, {ID}",
    inserts=(
        "INSERT INTO @ VALUES (1, 'a', true, 1Y, 2S, 3, 1.5D, 2.5F, 12.34, 1234567890.0123456789, X'CAFE', "
        "TIMESTAMP'2024-01-01 10:00:00', TIMESTAMP_NTZ'2024-01-01 10:00:00', DATE'2024-01-01', 'eu', "
        "DATE'2024-01-01'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "'us', NULL)",
        "INSERT INTO @ VALUES (3, 'c', false, -1Y, -2S, -3, -1.5D, -2.5F, -0.01, 0, X'', "
        "TIMESTAMP'1969-12-31 23:59:59.999999', TIMESTAMP_NTZ'1900-01-01 00:00:00', DATE'1900-01-01', 'eu', "
        "DATE'2024-01-02')",
    ),
    rows=3,
)
NESTED_COLUMNS = (
    "id INT, s STRUCT<a: INT, b: STRUCT<c: STRING, d: ARRAY<INT>>>, arr ARRAY<STRUCT<x: INT, y: MAP<STRING, INT>>>, "
    "m MAP<STRING, ARRAY<STRUCT<z: DOUBLE>>>, aa ARRAY<ARRAY<BIGINT>>, mm MAP<INT, MAP<STRING, DECIMAL(10,2)>>, "
    "ts_arr ARRAY<TIMESTAMP>"
)
NESTED_INSERTS = (
    "INSERT INTO @ VALUES (1, named_struct('a', 1, 'b', named_struct('c', 'x', 'd', array(1, 2))), "
    "array(named_struct('x', 1, 'y', map('k', 1))), map('m1', array(named_struct('z', 1.5D))), "
    "array(array(1L, 2L), array(3L)), map(1, map('a', 1.25BD)), array(TIMESTAMP'2024-01-01 00:00:00'))",
    "INSERT INTO @ VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(3, named_struct('a', NULL, 'b', NULL), array(named_struct('x', 2, 'y', NULL)), map('m2', NULL), "
    "array(array(4L)), map(2, map('b', NULL)), array(NULL))",
)
CHECKPOINT_EVERY_COMMIT = ("'delta.checkpointInterval' = '1', 'delta.checkpoint.writeStatsAsJson' = 'false', "
                           "'delta.checkpoint.writeStatsAsStruct' = 'true'")
COMPAT_V2_TABLES = {
    "partitioned-primitives": PRIMITIVES,
    "nested-id-mode": SparkTable(NESTED_COLUMNS, f"{V2}, {ID}", NESTED_INSERTS, rows=3),
    # and a v2 checkpoint after every commit, stats as structs only: numRecords must come from the checkpoint
    "nested-name-mode-v2-checkpoints": SparkTable(
        NESTED_COLUMNS, f"{V2}, {NAME}, {CHECKPOINT_EVERY_COMMIT}, 'delta.checkpointPolicy' = 'v2'", NESTED_INSERTS,
        rows=3),
}


@pytest.mark.parametrize("name", sorted(COMPAT_V2_TABLES))
def test_delta_compat_v2_table_passes(spark: Any, tmp_path: Path, name: str) -> None:
    spec = COMPAT_V2_TABLES[name]
    path = tmp_path / name
    spec.create(spark, path)
    assert {"icebergCompatV2", "columnMapping"} <= protocol_features(path)
    assert_compliant(path, "compat-v2")
    assert DeltaTable(str(path)).snapshot().num_records == spec.rows


def test_delta_compat_v2_table_after_evolution_update_delete_optimize(spark: Any, tmp_path: Path) -> None:
    """Schema evolution (new nested columns get nested ids), copy-on-write UPDATE/DELETE and OPTIMIZE keep the
    table compliant at every step (classic checkpoints every 2 commits, stats as structs only); and Spark reads
    the same live files as we do."""
    path = tmp_path / "evolved"
    run_sql(
        spark, path,
        f"CREATE TABLE @ (id INT, p STRING) USING delta PARTITIONED BY (p) TBLPROPERTIES ({V2}, {ID}, "
        "'delta.checkpointInterval' = '2', 'delta.checkpoint.writeStatsAsJson' = 'false')",
        "INSERT INTO @ VALUES (1, 'a'), (2, 'b')",
        "ALTER TABLE @ ADD COLUMNS (tags ARRAY<STRING>, attrs MAP<STRING, STRUCT<v: INT>>)",
        "INSERT INTO @ VALUES (3, 'a', array('t'), map('k', named_struct('v', 1)))",
        "UPDATE @ SET tags = array('u') WHERE id = 1",
        "DELETE FROM @ WHERE id = 2",
    )
    before_optimize = DeltaTable(str(path)).latest_version()
    assert_compliant(path, "compat-v2")
    run_sql(spark, path, "OPTIMIZE @")
    assert DeltaTable(str(path)).latest_version() > before_optimize
    assert_compliant(path, "compat-v2", version=before_optimize)
    assert_compliant(path, "compat-v2")
    assert DeltaTable(str(path)).snapshot().num_records == 2
    assert_same_files(spark, path)


def test_delta_compat_v1_table_passes(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "v1"
    SparkTable(
        columns="id BIGINT, s STRUCT<a: INT, b: STRING>, ts TIMESTAMP, amount DECIMAL(10,2), day DATE, p STRING",
        partitioned_by="p",
        properties=f"{V1}, {ID}",
        inserts=(
            "INSERT INTO @ VALUES (1, named_struct('a', 1, 'b', 'x'), TIMESTAMP'2024-01-01 00:00:00', 1.50, "
            "DATE'2024-01-01', 'a'), (2, NULL, NULL, NULL, NULL, NULL)",
            "INSERT INTO @ VALUES (3, named_struct('a', 3, 'b', NULL), NULL, 3.25, DATE'2024-03-01', 'b')",
        ),
        rows=3,
    ).create(spark, path)
    assert "icebergCompatV1" in protocol_features(path)
    assert_compliant(path, "compat-v1")
    assert DeltaTable(str(path)).snapshot().num_records == 3


# -- b) IcebergWriterCompatV1 ----------------------------------------------------------------------------


def test_spark_cannot_create_writer_compat_v1(spark: Any, tmp_path: Path) -> None:
    refused(
        lambda: run_sql(spark, tmp_path / "by-property",
                        f"CREATE TABLE @ (a BIGINT) USING delta TBLPROPERTIES ('{WRITER_COMPAT_V1}' = 'true', "
                        f"{V2}, {ID})"),
        "DELTA_UNKNOWN_CONFIGURATION", WRITER_COMPAT_V1,
    )
    refused(
        lambda: run_sql(spark, tmp_path / "by-feature",
                        "CREATE TABLE @ (a BIGINT) USING delta TBLPROPERTIES "
                        f"('delta.feature.icebergWriterCompatV1' = 'supported', {V2}, {ID})"),
        "DELTA_UNSUPPORTED_FEATURES_IN_CONFIG", "icebergwritercompatv1",
    )
    assert not (tmp_path / "by-property" / "_delta_log").exists()


def test_spark_escape_hatch_is_not_writer_compat_v1(spark: Any, tmp_path: Path) -> None:
    """With allowArbitraryProperties Spark stores the property, but nothing else of IcebergWriterCompatV1."""
    path = tmp_path / "arbitrary"
    with spark_conf(spark, {"spark.databricks.delta.allowArbitraryProperties.enabled": "true"}):
        run_sql(spark, path, f"CREATE TABLE @ (a BIGINT, b STRING) USING delta TBLPROPERTIES "
                             f"('{WRITER_COMPAT_V1}' = 'true', {V2}, {ID})",
                "INSERT INTO @ VALUES (1, 'x')")
    assert DeltaTable(str(path)).snapshot().metadata.bool_property(WRITER_COMPAT_V1)
    assert failed_rules(path, "writer-compat-v1") == {
        "protocol.feature.writer-compat-v1", "column-mapping.physical-name-format",
    }
    assert_compliant(path, "compat-v2")


KERNEL_ROWS = [
    {"id": 1, "name": "a", "tags": ["x", "y"], "attrs": {"k": 1}, "st": {"a": 1, "b": 2.5},
     "ts": "2024-01-01T00:00:00.000Z", "amount": 1.5, "day": "2024-01-01", "p": "A"},
    {"id": 2, "name": None, "tags": [], "attrs": {}, "st": None, "ts": "2024-02-01T12:00:00.000Z",
     "amount": 2.25, "day": "2024-02-01", "p": "A"},
    {"id": 3, "name": "c", "tags": None, "attrs": {"z": 3}, "st": {"a": 3, "b": None}, "ts": None,
     "amount": None, "day": None, "p": "B"},
]


def _drop_nulls(value: Any) -> Any:
    """As Spark's to_json writes a row: null struct fields left out."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def test_kernel_writer_compat_v1_table_passes(spark: Any, kernel: Any, tmp_path: Path) -> None:
    """Delta Kernel creates a partitioned IcebergWriterCompatV1 table with nested types and writes two
    commits; our validator finds nothing at writer-compat-v1 with data checks, and Spark reads the rows back."""
    t = kernel.types
    columns = (
        t.StructType().add("id", t.LongType.LONG).add("name", t.StringType.STRING)
        .add("tags", t.ArrayType(t.StringType.STRING, True))
        .add("attrs", t.MapType(t.StringType.STRING, t.IntegerType.INTEGER, True))
        .add("st", t.StructType().add("a", t.IntegerType.INTEGER).add("b", t.DoubleType.DOUBLE))
        .add("ts", t.TimestampType.TIMESTAMP).add("amount", t.DecimalType(10, 2)).add("day", t.DateType.DATE)
        .add("p", t.StringType.STRING)
    )
    path = tmp_path / "kernel-wc1"
    kernel_create(kernel, path, {WRITER_COMPAT_V1: "true"}, columns=columns, partition_columns=("p",))
    snap = DeltaTable(str(path)).snapshot()
    assert {"icebergWriterCompatV1", "icebergCompatV2", "columnMapping"} <= snap.protocol.effective_writer_features
    assert all(f.physical_name == f"col-{f.column_mapping_id}" for _, f in snap.schema.walk())
    report = validate(str(path), "writer-compat-v1", data_checks=True)
    assert report.violations == (), report.to_text()

    assert kernel_append(kernel, path, KERNEL_ROWS[:2], {"p": "A"}) == 1
    assert kernel_append(kernel, path, KERNEL_ROWS[2:], {"p": "B"}) == 2
    report = assert_compliant(path, "writer-compat-v1")
    assert report.files_sampled == 2
    assert DeltaTable(str(path)).snapshot().num_records == 3

    df = spark.read.format("delta").load(str(path))
    got = [json.loads(r[0]) for r in df.orderBy("id").selectExpr("to_json(struct(*))").collect()]
    assert got == [_drop_nulls(r) for r in KERNEL_ROWS]
    assert_same_files(spark, path)
    refused(lambda: run_sql(spark, path, "INSERT INTO @ SELECT * FROM @"),
            "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", "icebergWriterCompatV1")


@pytest.mark.parametrize(
    "properties",
    [
        {"delta.enableInCommitTimestamps": "true"},
        {"delta.enableTypeWidening": "true"},
        {"delta.checkpointPolicy": "v2"},
    ],
    ids=["in-commit-timestamps", "type-widening", "v2-checkpoints"],
)
def test_kernel_writer_compat_v1_with_allowed_features_passes(kernel: Any, tmp_path: Path,
                                                              properties: dict[str, str]) -> None:
    """Features of the allowlist that Kernel accepts next to IcebergWriterCompatV1 are accepted by us too."""
    path = tmp_path / "allowed"
    kernel_create(kernel, path, {WRITER_COMPAT_V1: "true", **properties})
    report = validate(str(path), "writer-compat-v1", data_checks=True)
    assert report.violations == (), report.to_text()


# -- c) what Delta refuses, and the same state committed without Delta's check ---------------------------

RECHECK = "ALTER TABLE @ SET TBLPROPERTIES ('deltaberg.parity' = '1')"


@dataclass(frozen=True)
class SparkRefusal:
    """Delta on Spark refuses ``refuse`` (on a fresh path) with an error containing ``error``; ``setup`` builds
    the table without the offending flag, ``commit`` (kwargs of commit_state) sets it, and our validator at
    ``level`` must fail exactly ``rules``. ``recheck``, if set, is a write Delta must refuse on that state
    (with ``recheck_error``, default ``error``). ``conf`` is in force for every statement."""

    refuse: tuple[str, ...]
    error: tuple[str, ...]
    setup: tuple[str, ...]
    commit: dict[str, Any]
    level: str
    rules: frozenset[str]
    recheck: str | None = RECHECK
    recheck_error: tuple[str, ...] | None = None
    conf: dict[str, str] = field(default_factory=dict)


def _enable(level_property: str, feature: str, **extra: Any) -> dict[str, Any]:
    return {"configuration": {level_property: "true"}, "writer_features": {feature, *extra.pop("features", ())},
            **extra}


ENABLE_V2 = _enable("delta.enableIcebergCompatV2", "icebergCompatV2")
ENABLE_V1 = _enable("delta.enableIcebergCompatV1", "icebergCompatV1")
SPARK_REFUSALS = {
    "v2-deletion-vectors-active": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V2}, {ID}, {DV})",),
        error=(f"{COMPAT}.DELETION_VECTORS_SHOULD_BE_DISABLED", "IcebergCompatV2"),
        setup=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({ID}, {DV})",
               "INSERT INTO @ SELECT /*+ COALESCE(1) */ * FROM VALUES (1), (2), (3)",  # one file: DELETE adds a DV
               "DELETE FROM @ WHERE a = 1"),
        commit=ENABLE_V2, level="compat-v2",
        rules=frozenset({"deletion-vectors.not-active", "deletion-vectors.no-live-files"}),
    ),
    "v1-deletion-vectors-supported": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V1}, {ID}, {DV})",),
        error=(f"{COMPAT}.DELETION_VECTORS_SHOULD_BE_DISABLED", "IcebergCompatV1"),
        setup=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({ID}, {DV})",),
        commit=ENABLE_V1, level="compat-v1", rules=frozenset({"deletion-vectors.not-supported"}),
    ),
    "v2-column-mapping-none": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V2}, 'delta.columnMapping.mode' = 'none')",),
        error=(f"{COMPAT}.WRONG_REQUIRED_TABLE_PROPERTY", "delta.columnMapping.mode"),
        setup=("CREATE TABLE @ (a INT) USING delta",),
        commit=_enable("delta.enableIcebergCompatV2", "icebergCompatV2", features={"columnMapping"},
                       min_reader_version=2),
        level="compat-v2", rules=frozenset({"column-mapping.mode"}),
    ),
    "v2-variant-column": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT, v VARIANT) USING delta TBLPROPERTIES ({V2}, {ID})",),
        error=(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", "variant"),
        setup=(f"CREATE TABLE @ (a INT, v VARIANT) USING delta TBLPROPERTIES ({ID})",),
        commit=ENABLE_V2, level="compat-v2", rules=frozenset({"types.compat-v2-allowlist"}),
    ),
    "v2-void-column": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT, v VOID) USING delta TBLPROPERTIES ({V2}, {ID})",),
        error=(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", "void"),
        setup=(f"CREATE TABLE @ (a INT, v VOID) USING delta TBLPROPERTIES ({ID})",),
        commit=ENABLE_V2, level="compat-v2", rules=frozenset({"types.compat-v2-allowlist"}),
    ),
    "v1-void-column": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT, v VOID) USING delta TBLPROPERTIES ({V1}, {ID})",),
        error=(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", "void"),
        setup=(f"CREATE TABLE @ (a INT, v VOID) USING delta TBLPROPERTIES ({ID})",),
        commit=ENABLE_V1, level="compat-v1", rules=frozenset({"types.compat-v1-no-map-array-void"}),
    ),
    "v1-map-column": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT, m MAP<STRING, INT>) USING delta TBLPROPERTIES ({V1}, {ID})",),
        error=(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", "map"),
        setup=(f"CREATE TABLE @ (a INT, m MAP<STRING, INT>) USING delta TBLPROPERTIES ({ID})",),
        commit=ENABLE_V1, level="compat-v1", rules=frozenset({"types.compat-v1-no-map-array-void"}),
    ),
    "v1-array-column": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT, s STRUCT<b: ARRAY<INT>>) USING delta TBLPROPERTIES ({V1}, {ID})",),
        error=(f"{COMPAT}.UNSUPPORTED_DATA_TYPE", "array"),
        setup=(f"CREATE TABLE @ (a INT, s STRUCT<b: ARRAY<INT>>) USING delta TBLPROPERTIES ({ID})",),
        commit=ENABLE_V1, level="compat-v1", rules=frozenset({"types.compat-v1-no-map-array-void"}),
    ),
    "v1-and-v2-both": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V1}, {V2}, {ID})",),
        error=(f"{COMPAT}.VERSION_MUTUAL_EXCLUSIVE",),
        setup=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V2}, {ID})",),
        commit=ENABLE_V1, level="compat-v2", rules=frozenset({"compat.v1-inactive"}),
    ),
    "v2-missing-num-records": SparkRefusal(
        refuse=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({V2}, {ID})", "INSERT INTO @ VALUES (1)"),
        error=("IcebergCompatV2 requires all AddFiles to contain the numRecords statistic",),
        setup=(f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({ID})", "INSERT INTO @ VALUES (1)"),
        commit=ENABLE_V2, level="compat-v2", rules=frozenset({"data.num-records"}),
        recheck="INSERT INTO @ VALUES (2)",
        conf={"spark.databricks.delta.stats.collect": "false"},
    ),
}


@pytest.mark.parametrize("case", sorted(SPARK_REFUSALS))
def test_delta_refuses_and_we_fail_the_same_state(spark: Any, tmp_path: Path, case: str) -> None:
    spec = SPARK_REFUSALS[case]
    with spark_conf(spark, spec.conf):
        refused(lambda: run_sql(spark, tmp_path / "refused", *spec.refuse), *spec.error)
        path = tmp_path / "offending"
        run_sql(spark, path, *spec.setup)
        commit_state(path, **copy.deepcopy(spec.commit))
        assert failed_rules(path, spec.level) == spec.rules
        if spec.recheck:
            refused(lambda: run_sql(spark, path, spec.recheck), *(spec.recheck_error or spec.error))


def test_delta_allows_compat_v1_with_deletion_vectors_supported_but_the_spec_does_not(
        spark: Any, tmp_path: Path) -> None:
    """Divergence: the protocol requires that deletionVectors is not even in the protocol for IcebergCompatV1;
    Delta 4.4.0 enables IcebergCompatV1 once deletion vectors are merely disabled. We follow the protocol."""
    path = tmp_path / "v1-dv-supported"
    run_sql(spark, path, f"CREATE TABLE @ (a INT) USING delta TBLPROPERTIES ({ID}, {DV})",
            "ALTER TABLE @ SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')",
            f"ALTER TABLE @ SET TBLPROPERTIES ({V1})")
    assert {"icebergCompatV1", "deletionVectors"} <= protocol_features(path)
    assert failed_rules(path, "compat-v1") == {"deletion-vectors.not-supported"}


def test_delta_writes_int64_timestamps_and_we_fail_int96(spark: Any, tmp_path: Path) -> None:
    """Delta does not refuse spark.sql.parquet.outputTimestampType=INT96 under IcebergCompatV2: it writes int64
    anyway. The same rows written as INT96 before IcebergCompatV2 is switched on by a commit fail our check."""
    with spark_conf(spark, {"spark.sql.parquet.outputTimestampType": "INT96"}):
        compat = tmp_path / "compat"
        run_sql(spark, compat, f"CREATE TABLE @ (a INT, ts TIMESTAMP) USING delta TBLPROPERTIES ({V2}, {ID})",
                "INSERT INTO @ VALUES (1, TIMESTAMP'2024-01-01 00:00:00')")
        offending = tmp_path / "offending"
        run_sql(spark, offending, f"CREATE TABLE @ (a INT, ts TIMESTAMP) USING delta TBLPROPERTIES ({ID})",
                "INSERT INTO @ VALUES (1, TIMESTAMP'2024-01-01 00:00:00')")

    def timestamp_types(path: Path) -> set[str]:
        files = our_files(path)
        assert files
        return {pq.ParquetFile(f).schema.column(1).physical_type for f in files}

    assert timestamp_types(compat) == {"INT64"}
    assert_compliant(compat, "compat-v2")
    assert timestamp_types(offending) == {"INT96"}
    commit_state(offending, **copy.deepcopy(ENABLE_V2))
    assert failed_rules(offending, "compat-v2") == {"data.timestamp-int64"}


def test_delta_writes_millisecond_timestamps_unless_compat_and_we_flag_them(spark: Any, tmp_path: Path) -> None:
    """With spark.sql.parquet.outputTimestampType=TIMESTAMP_MILLIS Delta on Spark writes microseconds under
    IcebergCompatV2 (compliant) and INT64 TIMESTAMP_MILLIS otherwise, which Iceberg Java's row-group filter misreads:
    validate flags each such file (data.timestamp-micros) and convert warns (issue 26 §6)."""
    from airflow_deltaberg.core.iceberg.convert import convert

    with spark_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS"}):
        compat = tmp_path / "compat"
        run_sql(spark, compat, f"CREATE TABLE @ (a INT, ts TIMESTAMP) USING delta TBLPROPERTIES ({V2}, {ID})",
                "INSERT INTO @ VALUES (1, TIMESTAMP'2024-01-01 00:00:00')")
        plain = tmp_path / "plain"
        run_sql(spark, plain, "CREATE TABLE @ (a INT, ts TIMESTAMP) USING delta",
                "INSERT INTO @ VALUES (1, TIMESTAMP'2024-01-01 00:00:00')")

    def units(path: Path) -> set[str]:
        files = our_files(path)
        assert files
        return {json.loads(pq.ParquetFile(f).schema.column(1).logical_type.to_json())["timeUnit"] for f in files}

    assert units(compat) == {"microseconds"}
    assert_compliant(compat, "compat-v2")
    assert not any("TIMESTAMP_MILLIS" in w for w in convert(str(compat)).warnings)
    assert units(plain) == {"milliseconds"}
    report = validate(str(plain), "compat-v2", data_checks=True)
    flagged = [v.location.path for v in report.violations if v.rule_id == "data.timestamp-micros"]
    assert flagged == DeltaTable(str(plain)).snapshot().files.column("path").to_pylist()
    assert any("TIMESTAMP_MILLIS" in w for w in convert(str(plain)).warnings)


def test_delta_alter_enabling_compat_v2_keeps_files_without_nested_ids(spark: Any, tmp_path: Path) -> None:
    """Delta enables IcebergCompatV2 by ALTER TABLE on a table whose files predate it: it assigns nested ids in
    the schema but neither rewrites nor refuses the old files, which lack the parquet field id of the array
    element. Our data check reports those files (REORG TABLE ... APPLY (UPGRADE UNIFORM ...) rewrites them)."""
    path = tmp_path / "altered"
    run_sql(spark, path, f"CREATE TABLE @ (a INT, b ARRAY<INT>) USING delta TBLPROPERTIES ({ID})",
            "INSERT INTO @ VALUES (1, array(1))", f"ALTER TABLE @ SET TBLPROPERTIES ({V2})")
    assert "icebergCompatV2" in protocol_features(path)
    assert failed_rules(path, "compat-v2") == {"data.parquet-field-ids"}


@dataclass(frozen=True)
class KernelRefusal:
    """Delta Kernel refuses to create an IcebergWriterCompatV1 table with ``properties`` (and column ``x`` of
    type ``extra``, a Kernel type name); the same state, committed onto a valid Kernel-made table, fails
    exactly ``rules`` at writer-compat-v1."""

    properties: dict[str, str]
    error: str
    commit: dict[str, Any]
    rules: frozenset[str]
    extra: str | None = None
    add_column: Any = None  # a Delta type (JSON) for add_column


KERNEL_REFUSALS = {
    "byte-column": KernelRefusal(
        {}, "icebergWriterCompatV1 does not support the data types: [byte]", {}, frozenset({"types.no-byte-short"}),
        extra="ByteType.BYTE", add_column="byte"),
    "short-column": KernelRefusal(
        {}, "icebergWriterCompatV1 does not support the data types: [short]", {},
        frozenset({"types.no-byte-short"}), extra="ShortType.SHORT", add_column="short"),
    "variant-column": KernelRefusal(
        {}, "icebergCompatV2 does not support the data types: [variant]", {"reader_features": {"variantType"}},
        frozenset({"types.compat-v2-allowlist", "disallowed.variant"}), extra="VariantType.VARIANT",
        add_column="variant"),
    "name-mode": KernelRefusal(
        {"delta.columnMapping.mode": "name"},
        "The value 'name' for the property 'delta.columnMapping.mode' is not compatible with icebergWriterCompatV1",
        {"configuration": {"delta.columnMapping.mode": "name"}}, frozenset({"column-mapping.id-mode"})),
    "compat-v2-disabled": KernelRefusal(
        {"delta.enableIcebergCompatV2": "false"},
        "The value 'false' for the property 'delta.enableIcebergCompatV2' is not compatible",
        {"configuration": {"delta.enableIcebergCompatV2": "false"}}, frozenset({"property.enable-compat-v2"})),
    "deletion-vectors": KernelRefusal(
        {"delta.enableDeletionVectors": "true"}, "Table features [deletionVectors] are incompatible",
        {"configuration": {"delta.enableDeletionVectors": "true"}, "reader_features": {"deletionVectors"}},
        frozenset({"deletion-vectors.not-active", "features.allowlist"})),
    "change-data-feed": KernelRefusal(
        {"delta.enableChangeDataFeed": "true"},
        "Table features [changeDataFeed] are incompatible with icebergWriterCompatV1",
        {"configuration": {"delta.enableChangeDataFeed": "true"}, "writer_features": {"changeDataFeed"}},
        frozenset({"disallowed.change-data-feed"})),
    "row-tracking": KernelRefusal(
        {"delta.enableRowTracking": "true"}, "Table features [rowTracking] are incompatible with icebergWriterCompatV1",
        {"configuration": {"delta.enableRowTracking": "true"}, "writer_features": {"rowTracking", "domainMetadata"}},
        frozenset({"disallowed.row-tracking"})),
    "column-defaults": KernelRefusal(
        {"delta.feature.allowColumnDefaults": "supported"},
        "default values table feature requires IcebergCompatV3",
        {"writer_features": {"allowColumnDefaults"}}, frozenset({"disallowed.default-columns"})),
}


def _kernel_type(kernel: Any, name: str) -> Any:
    cls, const = name.split(".")
    return getattr(getattr(kernel.types, cls), const)


@pytest.mark.parametrize("case", sorted(KERNEL_REFUSALS))
def test_kernel_refuses_writer_compat_v1_and_we_fail_the_same_state(kernel: Any, tmp_path: Path,
                                                                    case: str) -> None:
    spec = KERNEL_REFUSALS[case]
    extra = _kernel_type(kernel, spec.extra) if spec.extra else None
    refused(lambda: kernel_create(kernel, tmp_path / "refused", {WRITER_COMPAT_V1: "true", **spec.properties},
                                  extra=extra),
            "io.delta.kernel.exceptions.KernelException", spec.error)
    path = tmp_path / "offending"
    kernel_create(kernel, path, {WRITER_COMPAT_V1: "true"})
    assert failed_rules(path, "writer-compat-v1") == set()
    commit = copy.deepcopy(spec.commit)
    if spec.add_column:
        commit["schema"], config = add_column(path, "x", spec.add_column)
        commit["configuration"] = {**commit.get("configuration", {}), **config}
    commit_state(path, **commit)
    assert failed_rules(path, "writer-compat-v1") == spec.rules


# -- d) Delta on Spark reads fixture tables: same live files as our snapshot ------------------------------

SPARK_READ_FIXTURES = {
    "table-with-dv-small": {},
    "v2-checkpoints-parquet-with-sidecars": {},
    "v2-checkpoints-json-with-sidecars": {},  # file names with a literal '%' (test%25file%25prefix in the log)
    "data-reader-timestamp_ntz": {},  # partition directories with '%3A' (%253A in the log) and a null partition
    # Its compaction files are not reconciled: 0.5.compacted.json holds both a remove and a later add of the
    # same (path, deletion vector), e.g. part-00000-73f53b39 (added in commit 0, removed in commit 3). Delta on
    # Spark reads compactions by default and takes the add: 7 live files (23 rows) instead of the commits' 2 (5
    # rows). With compaction reads off it agrees with the commits, with us and with deltalake.
    "compacted-log-files-table": {"spark.databricks.delta.deltaLog.minorCompaction.useForReads": "false"},
    "partition_cm/id": {},
}


@pytest.mark.parametrize("name", sorted(SPARK_READ_FIXTURES))
def test_spark_reads_the_same_live_files(spark: Any, copy_fixture: Callable[[str], Path], name: str) -> None:
    with spark_conf(spark, SPARK_READ_FIXTURES[name]):
        assert_same_files(spark, copy_fixture(name))
