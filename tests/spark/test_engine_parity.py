"""One converter, two engines: a full conversion's manifests are the same entry by entry, and grouped the same,
whether written in process or by Spark executors (``airflow_deltaberg.spark.manifest_engine``).

Every fixture table that converts is converted twice, in two copies: in process, and with ``SparkManifestEngine``
on the shared local[2] session, with manifests of a few files each so that most tables get several groups. The
manifest lists and every manifest are read back with fastavro and compared in order: the manifests (content,
counts, partition summaries) and their entries (data file path relative to the table, partition tuple, record
count, value/null counts, bounds; delete files with the data file they reference). A table the in-process
conversion refuses must be refused by the Spark engine with the same error class.

The spark-submit application (local[2], its own JVM, one for the module) is compared the same way on a fixture
with deletion vectors and on a synthetic 2k-file partitioned table whose checkpoint carries the stats only as a
``stats_parsed`` struct with the ``nullCounts`` alias: 500 files per manifest and 1k checkpoint rows per stats
batch (both engines), so four groups fed by two stats batches, the path 100k files take at the defaults; the same
spark-submit converts a partitioned deltalake table with a checkpoint and removes at the application's own sizes,
registering it in a catalog. Iceberg Java reads the Spark-written tables with Delta on Spark's rows.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from pyiceberg.catalog import load_catalog
from support.environment import REPO_ROOT, copy_fixture_table
from support.manifests import assert_same_manifests, written_manifests
from support.oracle import rows_of
from support.spark_session import run_spark_submit
from support.tables import partitioned_events

from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.manifests import file_manifests
from airflow_deltaberg.spark.manifest_engine import SparkManifestEngine

pytestmark = pytest.mark.spark

#: A fixture table of 300k files (benchmarks/ cover the scale).
BIG_FIXTURE = "300k-add-files-100-col-partitioned"
REGENERATE_MANY = str(REPO_ROOT / "tests" / "support" / "regenerate_many.py")


def delta_on_spark_rows(spark: Any, path: Path) -> list[str]:
    # Delta on Spark reads log compactions by default; the fixture's are not reconciled (see test_delta_parity.py).
    spark.conf.set("spark.databricks.delta.deltaLog.minorCompaction.useForReads", "false")
    try:
        return _canonical(spark.read.format("delta").load(str(path)).collect())
    finally:
        spark.conf.unset("spark.databricks.delta.deltaLog.minorCompaction.useForReads")


def _canonical(rows: list[Any]) -> list[str]:
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in rows)


# -- every fixture, both engines in this process ------------------------------------------------------------------


@pytest.mark.fixture_tables(exclude=(BIG_FIXTURE,))
def test_every_fixture_table_gets_the_same_manifests(spark: Any, fixture_table: str, tmp_path: Path,
                                                     copy_fixture: Callable[[str], Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_manifests, "MANIFEST_ROWS", 3)  # several groups for most fixtures
    local = copy_fixture(fixture_table)
    with_spark = tmp_path / "with-spark" / fixture_table
    shutil.copytree(local, with_spark)
    try:
        in_process = convert(str(local))
    except DeltabergError as refused:
        with pytest.raises(type(refused)):
            convert(str(with_spark), manifest_engine=SparkManifestEngine(spark))
        return

    # Several groups per task: a task costs the shared session about 0.3 s.
    by_spark = convert(str(with_spark), manifest_engine=SparkManifestEngine(spark, groups_per_task=8))

    expected = written_manifests(in_process.metadata_location, local)
    assert_same_manifests(expected, written_manifests(by_spark.metadata_location, with_spark))
    assert sum(len(m["entries"]) for m in expected if m["list_row"]["content"] == 0) == in_process.files_added
    if in_process.files_added > 3:
        assert sum(m["list_row"]["content"] == 0 for m in expected) > 1


# -- Iceberg Java reads what Spark wrote ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["table-with-dv-small", "basic_partitioned", "partition_cm/name"])
def test_iceberg_java_reads_the_spark_written_table(iceberg_spark: Any, copy_fixture: Callable[[str], Path],
                                                    monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(file_manifests, "MANIFEST_ROWS", 2)
    path = copy_fixture(name)

    result = convert(str(path), manifest_engine=SparkManifestEngine(iceberg_spark, groups_per_task=4),
                     format_version=2)

    iceberg = iceberg_spark.read.format("iceberg").load(result.metadata_location).collect()
    assert _canonical(iceberg) == delta_on_spark_rows(iceberg_spark, path)


# -- the spark-submit application -----------------------------------------------------------------------------------


def synthetic_table(root: Path, files: int, buckets: int = 12) -> Path:
    """A Delta table of ``files`` adds (no data files: each add's stats give its numRecords) partitioned by an int
    ``bucket`` (10 sorts before 2 as a string), listed by a checkpoint whose adds carry their stats only as a
    ``stats_parsed`` struct naming the null counts ``nullCounts``."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "bucket", "type": "integer", "nullable": True, "metadata": {}},
    ]}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata = {"id": "00000000-0000-0000-0000-000000000100", "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema), "partitionColumns": ["bucket"], "configuration": {},
                "createdTime": 1_700_000_000_000}
    (log / f"{0:020}.json").write_text(json.dumps({"protocol": protocol}) + "\n" + json.dumps({"metaData": metadata})
                                       + "\n")
    (log / f"{1:020}.json").write_text(json.dumps({"commitInfo": {"timestamp": 1_700_000_100_000}}) + "\n")
    ids = np.arange(files, dtype=np.int64)
    bucket = (ids * 7919 % buckets).astype(str)
    values = pa.struct([("id", pa.int64()), ("name", pa.string())])
    stats = pa.StructArray.from_arrays([
        pa.array(ids % 50 + 1),
        pa.StructArray.from_arrays([pa.array(ids * 100), pa.array(np.char.add("a", ids.astype(str)))],
                                   fields=list(values)),
        pa.StructArray.from_arrays([pa.array(ids * 100 + 99), pa.array(np.char.add("z", ids.astype(str)))],
                                   fields=list(values)),
        pa.StructArray.from_arrays([pa.array(ids % 3), pa.array(ids % 5)], fields=list(pa.struct(
            [("id", pa.int64()), ("name", pa.int64())]))),
    ], names=["numRecords", "minValues", "maxValues", "nullCounts"])
    paths = np.char.add(np.char.add(np.char.add("bucket=", bucket), "/part-"), ids.astype(str))
    adds = pa.StructArray.from_arrays([
        pa.array(np.char.add(paths, ".parquet")),
        pa.array([[("bucket", b)] for b in bucket.tolist()], pa.map_(pa.string(), pa.string())),
        pa.array(ids % 1000 + 1000),
        pa.array(np.full(files, 1_700_000_000_000)),
        pa.array(np.full(files, True)),
        pa.nulls(files, pa.string()),
        stats,
    ], names=["path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "stats_parsed"])
    n = files + 2
    string_map = pa.map_(pa.string(), pa.string())
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    metadata_type = pa.struct([("id", pa.string()), ("format", pa.struct([("provider", pa.string()),
                                                                         ("options", string_map)])),
                               ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                               ("configuration", string_map), ("createdTime", pa.int64())])
    checkpoint = pa.table({
        "protocol": pa.concat_arrays([pa.array([protocol], protocol_type), pa.nulls(files + 1, protocol_type)]),
        "metaData": pa.concat_arrays([pa.nulls(1, metadata_type),
                                      pa.array([{**metadata, "format": {"provider": "parquet", "options": []},
                                                 "configuration": []}], metadata_type),
                                      pa.nulls(files, metadata_type)]),
        "add": pa.concat_arrays([pa.nulls(2, adds.type), adds]),
    })
    assert checkpoint.num_rows == n
    pq.write_table(checkpoint, log / f"{1:020}.checkpoint.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": n}))
    return root


#: The synthetic table's files, files per manifest and checkpoint rows per stats batch, in both engines: four
#: groups fed by two stats batches, as 100k files take at the defaults (25k per manifest, 64k per batch); the 100k
#: scale itself is benchmarks/bench_spark_regenerate.py's.
SYNTHETIC_FILES, MANIFEST_ROWS, STATS_BATCH_ROWS = 2_000, 500, 1_024
SUBMITTED = ("table-with-dv-small", "synthetic-2k-nullCounts")


class Submission(NamedTuple):
    """What the module's one spark-submit did: ``tables``, name -> (in-process copy, Spark copy, the in-process
    ConversionResult), the Spark runs' result files being ``<Spark copy>.json``; its stdout; and the catalog the
    ``events`` run registered its table in."""

    tables: dict[str, tuple[Path, Path, Any]]
    stdout: str
    catalog: dict[str, str]


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Submission:
    """One spark-submit of the regenerate application (one JVM for all; tests/support/regenerate_many.py): the
    SUBMITTED tables at the sizes above, and ``events`` (support.tables.partitioned_events) at the application's
    own sizes, registered as db.events in a SQLite catalog whose properties it reads from a file."""
    from airflow_deltaberg.core.delta.log import checkpoint_actions
    from airflow_deltaberg.core.delta.log.retention import DAY_MS
    from airflow_deltaberg.core.iceberg import history

    root = tmp_path_factory.mktemp("submitted")
    tables: dict[str, tuple[Path, Path, Any]] = {}
    arguments: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(history, "DEFAULT_LOG_RETENTION_MS", 100 * 365 * DAY_MS)
        patch.setattr(file_manifests, "MANIFEST_ROWS", MANIFEST_ROWS)
        patch.setattr(checkpoint_actions, "_STRUCT_STATS_BATCH_ROWS", STATS_BATCH_ROWS)
        for name in SUBMITTED:
            local = root / "local" / name
            if name.startswith("synthetic"):
                synthetic_table(local, files=SYNTHETIC_FILES)
            else:
                copy_fixture_table(name, local, fixtures_dir)
            with_spark = root / "with-spark" / name
            shutil.copytree(local, with_spark)
            tables[name] = (local, with_spark, convert(str(local)))
            arguments += ["--", "--sizes", str(MANIFEST_ROWS), str(STATS_BATCH_ROWS), "--table", str(with_spark),
                          "--result-file", f"{with_spark}.json"]
    local, with_spark = root / "local" / "events", root / "with-spark" / "events"
    partitioned_events(with_spark)
    shutil.copytree(with_spark, local)
    tables["events"] = (local, with_spark, convert(str(local)))  # the application's sizes: the defaults
    catalog = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}"}
    settings = root / "catalog.json"
    settings.write_text(json.dumps(catalog))
    arguments += ["--", "--table", str(with_spark), "--identifier", "db.events", "--catalog-config-json",
                  f"@{settings}", "--result-file", f"{with_spark}.json"]
    completed = run_spark_submit(REGENERATE_MANY, *arguments)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return Submission(tables, completed.stdout, catalog)


@pytest.fixture(scope="module")
def submitted(submission: Submission) -> dict[str, tuple[Path, Path, Any]]:
    return submission.tables


@pytest.mark.parametrize("name", SUBMITTED)
def test_spark_submit_writes_the_in_process_manifests(submitted: dict[str, tuple[Path, Path, Any]],
                                                      name: str) -> None:
    local, with_spark, in_process = submitted[name]
    document = json.loads(Path(f"{with_spark}.json").read_text())["result"]

    assert (document["mode"], document["files_added"]) == ("full", in_process.files_added)
    expected = written_manifests(in_process.metadata_location, local)
    assert_same_manifests(expected, written_manifests(document["metadata_location"], with_spark))
    if name.startswith("synthetic"):
        assert [len(m["entries"]) for m in expected] == [MANIFEST_ROWS] * 4
        null_counts = expected[0]["entries"][0]["data_file"]["null_value_counts"]
        assert null_counts and all(c["value"] is not None for c in null_counts)
    # Nothing of the attempt is left next to the metadata but what the metadata names.
    spilled = [p.name for p in (with_spark / "_iceberg" / "metadata").iterdir() if p.name.endswith(".spill.arrow")]
    assert spilled == []


def test_the_synthetic_checkpoint_is_read_in_several_stats_batches(submitted: dict[str, tuple[Path, Path, Any]],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes the small synthetic table take a big one's path: its stats come in more than one batch."""
    from airflow_deltaberg.core.delta import DeltaTable
    from airflow_deltaberg.core.delta.log import checkpoint_actions

    monkeypatch.setattr(checkpoint_actions, "_STRUCT_STATS_BATCH_ROWS", STATS_BATCH_ROWS)
    local, _, _ = submitted["synthetic-2k-nullCounts"]
    chunks = [len(chunk) for chunk in DeltaTable(str(local)).snapshot().iter_files()]
    assert len(chunks) > 1 and sum(chunks) == SYNTHETIC_FILES


def printed_results(stdout: str) -> list[dict[str, Any]]:
    """The result documents the application printed: spark-submit passes on the driver's stderr (logs) in its
    stdout; each result is an indented JSON block."""
    return [json.loads(block) for block in re.findall(r"^\{\n.*?^\}$", stdout, re.MULTILINE | re.DOTALL)]


def test_spark_submit_runs_the_application(submission: Submission) -> None:
    """The application file through the pyspark install's spark-submit (its own JVM): full conversion, catalog
    registration with the properties read from a file, the result on stdout and in the result file, and the
    manifests of the in-process conversion entry by entry (the application's sizes in both)."""
    local, path, in_process = submission.tables["events"]
    document = json.loads(Path(f"{path}.json").read_text())["result"]

    assert document in printed_results(submission.stdout)
    assert set(document) == set(ConversionResult.__dataclass_fields__)
    assert (document["mode"], document["identifier"], document["files_added"]) == (
        "full", "db.events", len(DeltaLakeTable(str(path)).file_uris()))
    # the manifests came from the executors
    assert re.search(rf"{re.escape(str(path))}: writing the manifests of .* in 1 Spark task\(s\)", submission.stdout)
    registered = load_catalog("deltaberg", **submission.catalog).load_table("db.events")
    assert registered.metadata_location == document["metadata_location"]
    # The batch reader casts every file to the table schema (deltalake's deletes write string_view columns).
    assert rows_of(registered.scan().to_arrow_batch_reader().read_all()) == rows_of(
        DeltaLakeTable(str(path)).to_pyarrow_table())
    assert_same_manifests(written_manifests(in_process.metadata_location, local),
                          written_manifests(document["metadata_location"], path))


# -- a failed Spark job ---------------------------------------------------------------------------------------------


class _FailingSpark:
    """A session whose job fails once the driver has spilled the groups."""

    class sparkContext:  # noqa: N801 - SparkSession's attribute name
        @staticmethod
        def parallelize(*_: Any) -> Any:
            raise RuntimeError("executor lost")


def test_a_failed_spark_job_leaves_nothing_under_iceberg(copy_fixture: Callable[[str], Path]) -> None:
    """The spill files and the manifests of the attempt go with it; no Spark JVM needed."""
    path = copy_fixture("table-with-dv-small")

    with pytest.raises(RuntimeError, match="executor lost"):
        convert(str(path), manifest_engine=SparkManifestEngine(_FailingSpark()))

    left = [p.name for p in (path / "_iceberg").rglob("*") if p.is_file()] if (path / "_iceberg").exists() else []
    assert left == []
