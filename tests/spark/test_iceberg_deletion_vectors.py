"""Deletion vectors: Iceberg readers (Iceberg Java through Spark, and pyiceberg) drop exactly the rows Delta drops
(deltalake's kernel reader at every version, Delta on Spark too at the latest), on the fixture tables with deletion
vectors and on tables Delta on Spark writes here, at every converted version (full and incremental conversion), as
Iceberg v2 position delete files and as Iceberg v3 deletion vectors in Puffin files; in v3, rows keep their row ids
(row lineage) across snapshots."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import StaticTable
from support.delta_log import latest_version
from support.environment import copy_fixture_table
from support.spark_rows import (
    FORMAT_VERSIONS,
    assert_kernel_agrees_with_spark,
    assert_kernel_rows,
    assert_same_rows,
    collect_each,
    delta_df,
    delta_reads,
    iceberg_df,
    kernel_read,
    pyiceberg_rows,
    run_sql,
)

from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark

DV_FIXTURES = ("table-with-dv-small", "with-short-dv", "cdf-table-with-dv")


def assert_delete_format(spark: Any, metadata_location: str, format_version: int) -> None:
    """v2: Parquet position delete files; v3: deletion vectors, each a blob at an offset of a Puffin file."""
    deletes = iceberg_df(spark, metadata_location, table="all_delete_files").collect()
    assert deletes
    if format_version == 2:
        assert {d.file_format for d in deletes} == {"PARQUET"}
    else:
        assert {d.file_format for d in deletes} == {"PUFFIN"}
        assert all(d.referenced_data_file and d.content_offset is not None and d.content_size_in_bytes for d in deletes)


def assert_every_snapshot_matches(spark: Any, path: Path, metadata_location: str) -> int:
    """Each Iceberg snapshot (read by Iceberg Java and by pyiceberg) against its Delta version as deltalake's kernel
    reader reads it, the latest version read by Delta on Spark as well, the two agreeing; returns the most delete
    files a snapshot had."""
    deletes = 0
    snapshots = iceberg_df(spark, metadata_location, table="snapshots").collect()
    versions = [int(row.summary["delta-version"]) for row in snapshots]
    icebergs = [iceberg_df(spark, metadata_location, row.snapshot_id) for row in snapshots]
    kernel = {version: kernel_read(path, version) for version in set(versions)}
    [(latest, latest_rows)] = delta_reads(spark, path, [max(versions)])
    assert_kernel_agrees_with_spark(latest, latest_rows, kernel[max(versions)], f"{path.name} latest")
    for row, version, iceberg, ice_rows in zip(snapshots, versions, icebergs, collect_each(icebergs), strict=True):
        deletes = max(deletes, int(row.summary.get("total-delete-files", "0")))
        delta = kernel[version]
        assert_kernel_rows(iceberg, delta, f"{path.name} v{version}", ice_rows)
        assert pyiceberg_rows(metadata_location, row.snapshot_id, delta.columns) == delta.rows, \
            f"pyiceberg {path.name} v{version}"
    return deletes


@pytest.fixture(scope="module")
def delta_read_copies(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of each DV fixture that Delta on Spark reads for both format versions (the tests convert their
    own copies)."""
    root = tmp_path_factory.mktemp("dv-fixtures")
    for name in DV_FIXTURES:
        copy_fixture_table(name, root / name, fixtures_dir)
    return root


@FORMAT_VERSIONS
@pytest.mark.parametrize("name", DV_FIXTURES)
def test_fixture_tables_with_deletion_vectors(iceberg_spark: Any, name: str, format_version: int,
                                              copy_fixture: Callable[[str], Path], delta_read_copies: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fixture converted one commit at a time (incremental: a DV replaced on the same file swaps its delete
    file, the data file entry stays), every version checked; then a full conversion of the latest version."""
    # with-short-dv stores its timestamps as INT96 (nanoseconds to pyarrow). pyiceberg casts those to the
    # microseconds of the Iceberg type by itself in v1/v2 tables only; for v3 it takes this option.
    monkeypatch.setenv("PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE", "true")
    path = copy_fixture(name)
    latest = None
    for version in range(0, 1 + max(int(p.stem) for p in (path / "_delta_log").glob("*.json"))):
        latest = convert(str(path), version=version, format_version=format_version)
    assert latest is not None
    # cdf-table-with-dv v5: the file's DV has cardinality 1 and deltalake drops value 3 (as we do), but Delta on
    # Spark 4.4.0 returns all 10 rows for that version, even in a fresh session reading only v5: a version before
    # the latest, read by deltalake only.
    delta_path = delta_read_copies / name  # the same log and data files as the converted copy
    assert assert_every_snapshot_matches(iceberg_spark, delta_path, latest.metadata_location) > 0
    assert_delete_format(iceberg_spark, latest.metadata_location, format_version)
    full = convert(str(path), full=True)  # keeps the table's format version
    assert StaticTable.from_metadata(full.metadata_location).metadata.format_version == format_version
    # The latest version's rows as Delta on Spark read them above.
    assert full.delta_version == latest.delta_version
    [(delta, delta_rows)] = delta_reads(iceberg_spark, delta_path, [full.delta_version])
    assert_same_rows(iceberg_df(iceberg_spark, full.metadata_location), delta, "full", delta_rows)


DML_STATEMENTS = (
    "DELETE FROM @ WHERE id % 7 = 0",
    "DELETE FROM @ WHERE id % 5 = 0",
    "UPDATE @ SET v = -1 WHERE id % 11 = 1",
    "DELETE FROM @ WHERE p = '2'",
    "OPTIMIZE @",
)


@pytest.fixture(scope="module")
def dml_table(iceberg_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, ...]]:
    """A table Delta on Spark writes with deletion vectors, once for both format versions (its DML is most of
    the module's Spark time): the table and the Delta version after the insert and after each of DML_STATEMENTS.
    Tests convert copies of it and read it through Delta on Spark."""
    path = tmp_path_factory.mktemp("dv-dml") / "dv_table"
    run_sql(
        iceberg_spark, path,
        "CREATE TABLE @ (id INT, p STRING, v DOUBLE) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        "INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, CAST(id % 3 AS STRING), id * 1.5 FROM range(0, 60)",
    )
    versions = [latest_version(path)]
    for statement in DML_STATEMENTS:
        run_sql(iceberg_spark, path, statement)
        versions.append(latest_version(path))
        assert versions[-1] > versions[-2], statement
    return path, tuple(versions)


@FORMAT_VERSIONS
def test_delta_on_spark_deletes_updates_and_merges(iceberg_spark: Any, format_version: int, tmp_path: Path,
                                                   dml_table: tuple[Path, tuple[int, ...]]) -> None:
    """Delta on Spark with deletion vectors: deletes on the same file twice (the DV grows and is replaced), an
    update (DV plus a new file), a partition-wide delete (file removed), then OPTIMIZE purging the DVs
    (dataChange=false rewrite); converted after every commit, and converted in full at the end."""
    written, versions = dml_table
    path = tmp_path / "dv_table"
    shutil.copytree(written, path)
    latest = convert(str(path), version=versions[0], format_version=format_version)
    for statement, version in zip(DML_STATEMENTS, versions[1:], strict=True):
        if statement.startswith("OPTIMIZE"):
            assert_delete_format(iceberg_spark, latest.metadata_location, format_version)
        latest = convert(str(path), version=version)
        assert latest.mode == "incremental", statement
    # Delta on Spark reads the written table (the same log and data files as the copy): its reads are shared.
    assert assert_every_snapshot_matches(iceberg_spark, written, latest.metadata_location) > 0
    # The latest version's rows as Delta on Spark read them above.
    [(final, final_rows)] = delta_reads(iceberg_spark, written, [versions[-1]])
    assert len(final_rows) == len([i for i in range(60) if i % 7 and i % 5 and i % 3 != 2])

    full_copy = tmp_path / "dv_table_full"
    shutil.copytree(written, full_copy)
    full = convert(str(full_copy), format_version=format_version)
    assert full.mode == "full"
    assert_same_rows(iceberg_df(iceberg_spark, full.metadata_location), final, "full", final_rows)


def _row_ids(spark: Any, metadata_location: str, snapshot_ids: list[int]) -> list[dict[tuple[str, int], int]]:
    """Per snapshot, (data file, position) -> _row_id of every row Iceberg Java reads in it (one Spark job)."""
    frames = [iceberg_df(spark, metadata_location, s).select("_file", "_pos", "_row_id") for s in snapshot_ids]
    out = []
    for rows in collect_each(frames):
        ids = {(r["_file"], r["_pos"]): r["_row_id"] for r in map(dict, rows)}
        assert len(ids) == len(rows), "a row read twice"
        assert None not in ids.values(), "a row without a row id"
        assert len(set(ids.values())) == len(ids), "two rows with the same row id"
        out.append(ids)
    return out


def test_v3_row_ids_are_unique_and_kept_by_later_snapshots(iceberg_spark: Any, tmp_path: Path) -> None:
    """v3 row lineage as Iceberg Java reads it: every row has a row id, unique in its snapshot, and a row that is
    still in the same data file at the same position keeps its id in every later snapshot (appends, deletion
    vectors, a removed partition, whose manifests are rewritten with the ids their files inherited)."""
    path = tmp_path / "lineage"
    run_sql(
        iceberg_spark, path,
        "CREATE TABLE @ (id INT, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        "INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, CAST(id % 3 AS STRING) FROM range(0, 30)",
    )
    latest = convert(str(path), format_version=3)
    for statement in ("INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, CAST(id % 3 AS STRING) FROM range(30, 45)",
                      "DELETE FROM @ WHERE id % 4 = 0",
                      "DELETE FROM @ WHERE p = '1'",
                      "INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, '2' FROM range(45, 50)"):
        run_sql(iceberg_spark, path, statement)
        latest = convert(str(path))
        assert latest.mode == "incremental", statement
    metadata = StaticTable.from_metadata(latest.metadata_location).metadata
    assert metadata.format_version == 3
    snapshots = sorted(metadata.snapshots, key=lambda s: s.sequence_number)
    previous: dict[tuple[str, int], int] = {}
    ids_per_snapshot = _row_ids(iceberg_spark, latest.metadata_location, [s.snapshot_id for s in snapshots])
    for snapshot, ids in zip(snapshots, ids_per_snapshot, strict=True):
        assert snapshot.first_row_id is not None and snapshot.added_rows is not None
        kept = {key: ids[key] for key in previous.keys() & ids.keys()}
        assert kept == {key: previous[key] for key in kept}, f"row ids changed at snapshot {snapshot.snapshot_id}"
        assert max(ids.values(), default=-1) < metadata.next_row_id
        previous = ids
    assert len(previous) == delta_df(iceberg_spark, path).count() == 27
