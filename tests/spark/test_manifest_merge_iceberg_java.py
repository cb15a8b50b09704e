"""Merged manifests (``core/iceberg/manifests/manifest_merge.py``) as Iceberg Java reads them: a Delta on Spark
table with deletion vectors, converted after every commit, whose data and delete manifests merge; Iceberg Java (strict
about sequence numbers: a position delete applies only to data files of a sequence number up to its own) reads the rows
Delta reads at each checked version (deltalake's kernel reader; Delta on Spark too at the latest), and the merged data
entries keep the sequence numbers they were added with."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import StaticTable
from support.delta_log import latest_version
from support.spark_rows import (
    FORMAT_VERSIONS,
    assert_kernel_agrees_with_spark,
    assert_kernel_rows,
    collect_each,
    delta_reads,
    iceberg_df,
    kernel_read,
    pyiceberg_rows,
    run_sql,
)

from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def written(iceberg_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """The Delta on Spark table, written once for both format versions (its commits are most of the module's
    time): the table and its version after the insert and after each of the 8 commits that follow."""
    path = tmp_path_factory.mktemp("merged") / "merged"
    run_sql(iceberg_spark, path,
            "CREATE TABLE @ (id INT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, CAST(id AS STRING) FROM range(0, 40)")
    versions = [latest_version(path)]
    for k in range(8):
        if k % 3 == 0:  # a deletion vector on the first file (its delete file replaced), or a new file's
            run_sql(iceberg_spark, path, f"DELETE FROM @ WHERE id = {k} OR id = {1000 + k - 3}")
        else:
            run_sql(iceberg_spark, path, f"INSERT INTO @ VALUES ({1000 + k}, 'new')")
        versions.append(latest_version(path))
    return path, versions


@FORMAT_VERSIONS
def test_merged_manifests_read_by_iceberg_java(iceberg_spark: Any, format_version: int, tmp_path: Path,
                                               written: tuple[Path, list[int]]) -> None:
    """A copy of the table converted after every commit."""
    source, versions = written
    path = tmp_path / "merged"
    shutil.copytree(source, path)
    # Merged at 3 manifests, so that a few commits merge data and delete manifests.
    latest = convert(str(path), version=versions[0], format_version=format_version,
                     table_properties={"commit.manifest.min-count-to-merge": "3"})
    for version in versions[1:]:
        latest = convert(str(path), version=version)
        assert latest.mode == "incremental"

    manifests = iceberg_df(iceberg_spark, latest.metadata_location, table="manifests").collect()
    assert len(manifests) <= 4
    assert any(m.existing_data_files_count for m in manifests)  # data entries merged from earlier snapshots
    snapshots = iceberg_df(iceberg_spark, latest.metadata_location, table="snapshots").orderBy("committed_at").collect()
    checked = snapshots[:1] + snapshots[-2:]
    icebergs = [iceberg_df(iceberg_spark, latest.metadata_location, row.snapshot_id) for row in checked]
    # The latest version read by Delta on Spark too (the written table: the copy's log and files; once for both
    # tests), agreeing with deltalake's kernel reader, which reads every checked version.
    checked_versions = [int(row.summary["delta-version"]) for row in checked]
    kernel = {version: kernel_read(source, version) for version in set(checked_versions)}
    [(spark_latest, spark_rows)] = delta_reads(iceberg_spark, source, [versions[-1]])
    assert_kernel_agrees_with_spark(spark_latest, spark_rows, kernel[versions[-1]], "latest")
    for row, version, iceberg, ice_rows in zip(checked, checked_versions, icebergs, collect_each(icebergs),
                                               strict=True):
        delta = kernel[version]
        assert_kernel_rows(iceberg, delta, f"v{version}", ice_rows)
        assert pyiceberg_rows(latest.metadata_location, row.snapshot_id, delta.columns) == delta.rows
    # Every live entry carries the sequence numbers of the snapshot that added its file (its snapshot_id).
    sequence = {s.snapshot_id: s.sequence_number
                for s in StaticTable.from_metadata(latest.metadata_location).metadata.snapshots}
    entries = iceberg_df(iceberg_spark, latest.metadata_location, table="entries") \
        .selectExpr("status", "snapshot_id", "sequence_number", "file_sequence_number").collect()
    live = [e for e in entries if e.status != 2]
    assert len({e.snapshot_id for e in live}) >= 4
    for entry in live:
        assert entry.sequence_number == entry.file_sequence_number == sequence[entry.snapshot_id], entry
