"""Iceberg regeneration with Spark (airflow_deltaberg.spark.regenerate): the manifests of a full conversion
written by Spark executors give the same Iceberg table as the in-process conversion.

Each table is converted twice, in two copies: in process, and with ``SparkManifestEngine`` on the shared session
(manifests of 8 files, so that several tasks write manifests even for small tables). The manifests, read back
with pyiceberg, must list the same data files (path, partition, record count, size, null counts, bounds) and the
same position-delete files (partition, record count, the data file and positions they hold). The rows pyiceberg
reads must be deltalake's for deltalake tables, and Delta on Spark's for the fixtures (deltalake refuses deletion
vectors). The application's real spark-submit is test_engine_parity.py's (one for several tables).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.spark_rows import FORMAT_VERSIONS
from support.tables import event_rows, partitioned_events

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.manifests import file_manifests
from airflow_deltaberg.spark.manifest_engine import SparkManifestEngine
from airflow_deltaberg.spark.regenerate import main

pytestmark = pytest.mark.spark


# -- helpers ----------------------------------------------------------------------------------------------------


def _relative(location: str | None, root: Path) -> str | None:
    prefix = f"{root}/"
    return location[len(prefix):] if location and location.startswith(prefix) else location


def iceberg_files(metadata_location: str, root: Path) -> dict[str, list[Any]]:
    """The live entries of the current snapshot, read from the Avro manifests with pyiceberg, paths relative to
    ``root``: data files with their partition, counts and bounds; delete files with their positions."""
    table = StaticTable.from_metadata(metadata_location)
    data: list[Any] = []
    deletes: list[Any] = []
    for manifest in table.current_snapshot().manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            if int(f.content) == 0:
                data.append((
                    _relative(f.file_path, root), repr(f.partition), f.record_count, f.file_size_in_bytes,
                    sorted((f.null_value_counts or {}).items()), sorted((f.lower_bounds or {}).items()),
                    sorted((f.upper_bounds or {}).items()),
                ))
            else:
                rows = pq.read_table(f.file_path)
                positions = sorted(zip((_relative(p, root) for p in rows.column("file_path").to_pylist()),
                                       rows.column("pos").to_pylist(), strict=True))
                deletes.append((repr(f.partition), f.record_count, positions))
    return {"data": sorted(data), "deletes": sorted(deletes)}


def manifest_count(metadata_location: str, content: int) -> int:
    table = StaticTable.from_metadata(metadata_location)
    return sum(1 for m in table.current_snapshot().manifests(table.io) if int(m.content) == content)


def _plain(value: Any) -> Any:
    """Values as both readers can agree on: UTC datetimes without their zone (Delta on Spark returns them naive in
    the session's zone, UTC), binary as bytes."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(_plain(r), sort_keys=True, default=str) for r in rows)


def scanned(table: Any) -> list[str]:
    # The batch reader casts every file to the table schema: deltalake's deletes write string_view columns, its
    # appends string, and pyiceberg's to_arrow() cannot concatenate the two.
    return _canonical(table.scan().to_arrow_batch_reader().read_all().to_pylist())


def iceberg_rows(metadata_location: str) -> list[str]:
    return scanned(StaticTable.from_metadata(metadata_location))


@pytest.fixture(autouse=True)
def _small_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Manifests of a few files each, so that even small tables get several groups (several Spark tasks)."""
    monkeypatch.setattr(file_manifests, "MANIFEST_ROWS", 8)


def engine_for(spark: Any, location: Path) -> SparkManifestEngine:
    """An engine with one group (data manifest) per Spark task."""
    return SparkManifestEngine(spark, groups_per_task=1)


def convert_both(spark: Any, local: Path, tmp_path: Path, name: str | None = None
                 ) -> tuple[ConversionResult, ConversionResult, Path]:
    """Convert ``local`` in process and a copy of it (named ``name``) with Spark; the results and the copy."""
    with_spark = tmp_path / "with-spark" / (name or local.name)
    shutil.copytree(local, with_spark)
    in_process = convert(str(local))
    engine = engine_for(spark, with_spark)
    by_spark = convert(str(with_spark), manifest_engine=engine)
    assert engine.calls == 1
    return in_process, by_spark, with_spark


def assert_same_conversion(in_process: ConversionResult, local: Path, by_spark: ConversionResult,
                           with_spark: Path) -> None:
    assert (by_spark.mode, by_spark.delta_version, by_spark.files_added, by_spark.records) == (
        in_process.mode, in_process.delta_version, in_process.files_added, in_process.records)
    expected = iceberg_files(in_process.metadata_location, local)
    assert iceberg_files(by_spark.metadata_location, with_spark) == expected
    assert len(expected["data"]) == in_process.files_added


def deltalake_rows(path: Path, version: int | None = None) -> list[str]:
    return _canonical(DeltaLakeTable(str(path), version=version).to_pyarrow_table().to_pylist())


# -- Spark against in-process -----------------------------------------------------------------------------------


def test_partitioned_table_with_checkpoint_and_removes(spark: Any, tmp_path: Path) -> None:
    local = partitioned_events(tmp_path / "events")
    segment = DeltaTable(str(local)).snapshot().segment
    assert segment.checkpoint is not None and segment.checkpoint.version == 1 and len(segment.commits) == 2

    # Spark reads the log by path: characters Hadoop would take for globs or escapes must stay literal.
    in_process, by_spark, with_spark = convert_both(spark, local, tmp_path, name="events [1] {a,b} %41 *")

    assert_same_conversion(in_process, local, by_spark, with_spark)
    assert by_spark.mode == "full" and by_spark.files_added == len(DeltaLakeTable(str(local)).file_uris())
    assert manifest_count(by_spark.metadata_location, 0) > 1  # written by several tasks
    # deltalake cannot open the copy's folder name ("Invalid object store url"): the original has the same rows.
    assert iceberg_rows(by_spark.metadata_location) == deltalake_rows(local)


@FORMAT_VERSIONS
def test_incremental_after_a_spark_conversion_stays_in_the_driver(spark: Any, tmp_path: Path,
                                                                  format_version: int) -> None:
    """The conversion state the executors wrote serves the next, incremental run (no Spark job); in v3 the
    executors write v3 manifests, and the driver's rewrite of their manifests keeps the row ids they assigned."""
    path = partitioned_events(tmp_path / "events")
    engine = engine_for(spark, path)
    first = convert(str(path), manifest_engine=engine, format_version=format_version)
    write_deltalake(str(path), event_rows(100, 10), mode="append")
    DeltaLakeTable(str(path)).delete("bucket = 3")  # removes files the executors' manifests list

    second = convert(str(path), manifest_engine=engine)

    assert (first.mode, second.mode, second.snapshots_written, engine.calls) == ("full", "incremental", 2, 1)
    assert iceberg_rows(second.metadata_location) == deltalake_rows(path)
    metadata = StaticTable.from_metadata(second.metadata_location).metadata
    assert metadata.format_version == format_version
    if format_version == 3:
        snapshots = sorted(metadata.snapshots, key=lambda s: s.sequence_number)
        assert [s.first_row_id for s in snapshots] == [0, *(s.first_row_id + s.added_rows for s in snapshots[:-1])]
        assert metadata.next_row_id == snapshots[-1].first_row_id + snapshots[-1].added_rows


#: Log layouts: V2 checkpoints (Parquet, JSON) with sidecars, a multi-part checkpoint whose parts differ in
#: columns, stats only as structs, and deletion vectors with removes and log compactions.
FIXTURES = [
    "v2-checkpoints-parquet-with-sidecars",
    "v2-json-sidecars-struct-stats-only",
    "parquet_row_group_skipping",
    "table-with-dv-small",
    "compacted-log-files-table",
]


#: Delta on Spark reads log compactions by default, and the fixture's are not reconciled (see test_delta_parity.py):
#: it then returns files the commits removed. Its reads of the commits agree with ours and deltalake's.
COMPACTION_READS = "spark.databricks.delta.deltaLog.minorCompaction.useForReads"


def delta_on_spark_rows(spark: Any, path: Path) -> list[str]:
    before = spark.conf.get(COMPACTION_READS, None)
    spark.conf.set(COMPACTION_READS, "false")
    try:
        read = spark.read.format("delta").load(str(path)).collect()
    finally:
        spark.conf.unset(COMPACTION_READS) if before is None else spark.conf.set(COMPACTION_READS, before)
    return _canonical([r.asDict(recursive=True) for r in read])


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_tables(spark: Any, copy_fixture: Callable[[str], Path], tmp_path: Path, name: str) -> None:
    local = copy_fixture(name)

    in_process, by_spark, with_spark = convert_both(spark, local, tmp_path)

    assert_same_conversion(in_process, local, by_spark, with_spark)
    # Delta on Spark applies the deletion vectors; the Iceberg reader the position deletes.
    assert iceberg_rows(by_spark.metadata_location) == delta_on_spark_rows(spark, with_spark)
    has_dvs = DeltaTable(str(local)).snapshot().files.column("deletionVector").null_count < in_process.files_added
    assert (manifest_count(by_spark.metadata_location, 1) > 0) == has_dvs


# -- the application ----------------------------------------------------------------------------------------------


def test_application_failure_writes_a_typed_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table that is not there fails before Spark starts: exit 2, the error in the result file."""
    result_file = tmp_path / "result.json"

    code = main(["--table", str(tmp_path / "missing"), "--result-file", str(result_file)])

    assert code == 2
    error = json.loads(result_file.read_text())["error"]
    assert (error["type"], error["retryable"], error["table"]) == ("NotADeltaTableError", False,
                                                                  str(tmp_path / "missing"))
    assert "NotADeltaTableError" in capsys.readouterr().err
