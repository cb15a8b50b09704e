"""The writer-support table (airflow_deltaberg.core.enable.writers) against the real engines: after an enable at
each level, every engine marked ``tested`` appends (or reads) and must succeed or be refused exactly as the table
says - deltalake 1.6.6 (the wheel of the tests), Delta on Spark 4.4.0 (the test run's Spark session) and Delta
Kernel 4.4.0 (jars in .jars, driven through py4j on the same JVM). A wrong cell fails its test.

Each level is enabled once on a table deltalake wrote (the rewrite path, run by this process's Spark), and each
engine works on its own copy of that table.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as PeerTable
from deltalake import write_deltalake
from support.tables import rows_of

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.schema import StructType
from airflow_deltaberg.core.enable import writers
from airflow_deltaberg.core.enable.levels import ENABLE_LEVELS
from airflow_deltaberg.core.enable.run import enable
from airflow_deltaberg.spark.local_rewrite import run_rewrite_locally

pytestmark = pytest.mark.spark

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", None, "c"]})
NEW_ROW = {"id": 10, "name": "new"}
#: What each engine's refusal must say, beyond the features the table's note names after its colon.
REFUSAL_NEEDLES = {
    writers.DELTA_SPARK_44.key: "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE",
    writers.DELTALAKE.key: "Unsupported table features required",
    writers.DELTALAKE_ARROW.key: "DeltaProtocolError",
}


def refusal_needles(cell: writers.Support) -> list[str]:
    """The engine's error class and the features the note names ("...: a, b" -> a, b)."""
    named = cell.note.split(":", 1)[1].split(";")[0] if cell.engine.key != writers.DELTALAKE_ARROW.key else ""
    features = [f.strip() for f in named.split(",") if f.strip()]
    return [REFUSAL_NEEDLES[cell.engine.key], *features]


def test_the_table_covers_every_enable_level_and_engine() -> None:
    assert set(writers.LEVELS) == set(ENABLE_LEVELS)
    for level in writers.LEVELS:
        cells = writers.support(level)
        assert [c.engine for c in cells] == list(writers.ENGINES)
        for c in cells:
            allowed = {writers.WRITES, writers.REFUSES, writers.UNKNOWN} if c.engine.role == "writer" else {
                writers.READS, writers.REFUSES}
            assert c.outcome in allowed, c
            assert c.engine.source != "tested" or c.outcome != writers.UNKNOWN, c


@pytest.fixture(scope="module")
def enabled_tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One table per level: written by deltalake, then enabled at that level (the data rewrite)."""
    root = tmp_path_factory.mktemp("enabled")
    out = {}
    for level in writers.LEVELS:
        path = root / level
        write_deltalake(str(path), ROWS)
        result = enable(str(path), level=level, rewrite_runner=run_rewrite_locally)
        assert (result.action, result.committed_version) == ("rewrite", 1)
        out[level] = path
    return out


def _copy(enabled_tables: dict[str, Path], level: str, tmp_path: Path) -> Path:
    target = tmp_path / "t"
    shutil.copytree(enabled_tables[level], target)
    return target


# -- the engines' appends and reads --------------------------------------------------------------------------


def deltalake_append(path: Path) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array([NEW_ROW["id"]], pa.int64()), "name": [NEW_ROW["name"]]}),
                    mode="append")


def spark_append(spark: Any, path: Path) -> None:
    spark.sql(f"INSERT INTO delta.`{path}` VALUES ({NEW_ROW['id']}, '{NEW_ROW['name']}')")


def _to_physical(row: dict[str, Any], schema: StructType) -> dict[str, Any]:
    return {f.physical_name: row.get(f.name) for f in schema.fields}


def kernel_append(kernel: Any, path: Path) -> None:
    """Append NEW_ROW through Delta Kernel: the physical batch is built here (Kernel's transformLogicalData
    refuses column-mapped tables), written by Kernel's ParquetHandler and committed with generateAppendActions
    (as tests/spark/test_delta_parity.py does for IcebergWriterCompatV1)."""
    k, engine, jvm = kernel.api, kernel.engine, kernel.jvm
    txn = (k.Table.forPath(engine, str(path))
           .createTransactionBuilder(engine, "airflow-deltaberg-tests", k.Operation.WRITE).build(engine))
    state = txn.getTransactionState(engine)
    logical = txn.getSchema(engine)
    id_mode = getattr(k.internal.util, "ColumnMapping$ColumnMappingMode").ID
    physical = k.internal.util.ColumnMapping.convertToPhysicalSchema(logical, logical, id_mode)
    ours = DeltaTable(str(path)).snapshot().schema
    lines = kernel.java_list([json.dumps(_to_physical(NEW_ROW, ours))])
    vector = k.internal.util.VectorUtils.buildColumnVector(lines, kernel.types.StringType.STRING)
    batch = engine.getJsonHandler().parseJson(vector, physical, jvm.java.util.Optional.empty())
    data = k.internal.util.Utils.singletonCloseableIterator(
        k.data.FilteredColumnarBatch(batch, jvm.java.util.Optional.empty()))
    context = k.Transaction.getWriteContext(engine, state, kernel.java_map({}))
    files = engine.getParquetHandler().writeParquetFiles(context.getTargetDirectory(), data,
                                                         context.getStatisticsColumns())
    actions = k.Transaction.generateAppendActions(engine, state, files, context)
    txn.commit(engine, k.utils.CloseableIterable.inMemoryIterable(actions))


def _error_text(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return f"{type(exc).__name__}: {exc}" + (f" {java.getMessage()}" if java is not None else "")


def attempt(action: Callable[[], Any]) -> tuple[bool, str]:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - each engine raises its own types: the outcome is what counts
        return False, _error_text(exc)
    return True, ""


def expected_rows(with_new: bool) -> list[dict[str, Any]]:
    rows = ROWS.to_pylist() + ([NEW_ROW] if with_new else [])
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def check_writer(cell: writers.Support, path: Path, action: Callable[[], Any]) -> None:
    before = sorted(p.name for p in (path / "_delta_log").glob("*.json"))
    ok, error = attempt(action)
    if cell.outcome == writers.WRITES:
        assert ok, f"{cell.text()} says it writes, but it refused: {error[:2000]}"
        assert rows_of(path) == expected_rows(True)
        # Still at the level after the append.
        assert DeltaTable(str(path)).snapshot().metadata.bool_property(ENABLE_LEVELS[cell.level].level.property)
    else:
        assert not ok, f"{cell.text()} says it refuses, but it wrote"
        needles = refusal_needles(cell)
        assert all(n in error for n in needles), f"{cell.engine.name} refused, but not as the table says " \
                                                 f"({needles}): {error[:2000]}"
        assert sorted(p.name for p in (path / "_delta_log").glob("*.json")) == before
        assert rows_of(path) == expected_rows(False)


@pytest.mark.parametrize("level", writers.LEVELS)
def test_deltalake_append(level: str, enabled_tables: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(enabled_tables, level, tmp_path)
    check_writer(writers.cell(writers.DELTALAKE, level), path, lambda: deltalake_append(path))


@pytest.mark.parametrize("level", writers.LEVELS)
def test_delta_spark_append(level: str, spark: Any, enabled_tables: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(enabled_tables, level, tmp_path)
    check_writer(writers.cell(writers.DELTA_SPARK_44, level), path, lambda: spark_append(spark, path))


@pytest.mark.parametrize("level", writers.LEVELS)
def test_delta_kernel_append(level: str, kernel: Any, enabled_tables: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(enabled_tables, level, tmp_path)
    check_writer(writers.cell(writers.KERNEL_44, level), path, lambda: kernel_append(kernel, path))


@pytest.mark.parametrize("level", writers.LEVELS)
def test_readers(level: str, spark: Any, enabled_tables: dict[str, Path]) -> None:
    path = enabled_tables[level]
    want = expected_rows(False)

    def spark_rows() -> list[dict[str, Any]]:
        rows = [r.asDict() for r in spark.read.format("delta").load(str(path)).collect()]
        return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))

    def arrow_rows() -> list[dict[str, Any]]:
        rows = PeerTable(str(path)).to_pyarrow_table().to_pylist()
        return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))

    for engine, read in ((writers.SPARK_READER, spark_rows), (writers.DELTALAKE_ARROW, arrow_rows),
                         (writers.DELTALAKE_QUERY, lambda: rows_of(path))):
        cell = writers.cell(engine, level)
        got: list[Any] = []
        ok, error = attempt(lambda read=read, got=got: got.extend(read()))
        if cell.outcome == writers.READS:
            assert ok, f"{cell.text()} says it reads, but: {error[:2000]}"
            assert got == want, cell.text()
        else:
            assert not ok, f"{cell.text()} says it refuses, but it read {got}"
            assert all(n in error for n in [REFUSAL_NEEDLES[engine.key], "columnMapping"]), error[:2000]


# -- writer-compat-v3: the table Kernel itself creates at that level -----------------------------------------


def test_writer_compat_v3_enable_gives_what_kernel_creates(spark: Any, kernel: Any, enabled_tables: dict[str, Path],
                                                           tmp_path: Path) -> None:
    """The enabled table has the features, properties and column mapping Delta Kernel 4.4 gives a table it creates
    with delta.enableIcebergWriterCompatV3, and row ids Delta on Spark reads back (0..n-1, in the rewrite's
    commit)."""
    k = kernel.api
    reference = tmp_path / "kernel-wc3"
    schema = kernel.types.StructType().add("id", kernel.types.LongType.LONG).add("name", kernel.types.StringType.STRING)
    txn = (k.Table.forPath(kernel.engine, str(reference))
           .createTransactionBuilder(kernel.engine, "airflow-deltaberg-tests", k.Operation.CREATE_TABLE)
           .withSchema(kernel.engine, schema)
           .withTableProperties(kernel.engine, kernel.java_map({"delta.enableIcebergWriterCompatV3": "true"}))
           .build(kernel.engine))
    txn.commit(kernel.engine, k.utils.CloseableIterable.emptyIterable())
    theirs = DeltaTable(str(reference)).snapshot()
    ours = DeltaTable(str(enabled_tables["writer-compat-v3"])).snapshot()

    legacy = {"appendOnly", "invariants"}  # Kernel lists the legacy features its writer version 2 implied
    assert set(theirs.protocol.effective_writer_features) - legacy <= set(ours.protocol.effective_writer_features)
    assert {key: value for key, value in theirs.metadata.configuration.items() if not key.startswith(
        "delta.rowTracking.")} == {key: value for key, value in ours.metadata.configuration.items()
                                   if not key.startswith("delta.rowTracking.")}
    assert set(theirs.metadata.configuration) == set(ours.metadata.configuration)
    assert ours.column_mapping_mode == "id"
    assert all(f.physical_name == f"col-{f.column_mapping_id}" for _, f in ours.schema.walk())

    adds = [line["add"] for line in _commit(enabled_tables["writer-compat-v3"], 1) if "add" in line]
    assert adds and all(a["defaultRowCommitVersion"] == 1 for a in adds)
    domains = [line["domainMetadata"] for line in _commit(enabled_tables["writer-compat-v3"], 1)
               if "domainMetadata" in line]
    assert [(d["domain"], json.loads(d["configuration"]), d["removed"]) for d in domains] == [
        ("delta.rowTracking", {"rowIdHighWaterMark": 2}, False)]
    got = spark.sql(f"SELECT id, _metadata.row_id AS row_id, _metadata.row_commit_version AS v "
                    f"FROM delta.`{enabled_tables['writer-compat-v3']}`").collect()
    assert sorted(r["row_id"] for r in got) == [0, 1, 2] and {r["v"] for r in got} == {1}


def _commit(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]
