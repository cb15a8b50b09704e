"""Merged manifests (``core/iceberg/manifests/manifest_merge.py``) as Iceberg Java reads them: a Delta on Spark
table with deletion vectors, converted after every commit, whose data and delete manifests merge; Iceberg Java (strict
about sequence numbers: a position delete applies only to data files of a sequence number up to its own) reads the rows
Delta on Spark reads at each checked version, and the merged data entries keep the sequence numbers they were added
with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import StaticTable
from test_iceberg_deletion_vectors import FORMAT_VERSIONS, _pyiceberg_rows, _spark_rows
from test_iceberg_read_parity import assert_same_rows, delta_df, iceberg_df, run_sql

from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark


@FORMAT_VERSIONS
def test_merged_manifests_read_by_iceberg_java(iceberg_spark: Any, format_version: int, tmp_path: Path) -> None:
    path = tmp_path / "merged"
    run_sql(iceberg_spark, path,
            "CREATE TABLE @ (id INT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "INSERT INTO @ SELECT /*+ REPARTITION(1) */ id, CAST(id AS STRING) FROM range(0, 40)")
    # Merged at 3 manifests, so that a few commits (a second or two each on Spark) merge data and delete manifests.
    latest = convert(str(path), format_version=format_version,
                     table_properties={"commit.manifest.min-count-to-merge": "3"})
    for k in range(8):
        if k % 3 == 0:  # a deletion vector on the first file (its delete file replaced), or a new file's
            run_sql(iceberg_spark, path, f"DELETE FROM @ WHERE id = {k} OR id = {1000 + k - 3}")
        else:
            run_sql(iceberg_spark, path, f"INSERT INTO @ VALUES ({1000 + k}, 'new')")
        latest = convert(str(path))
        assert latest.mode == "incremental"

    manifests = iceberg_df(iceberg_spark, latest.metadata_location, table="manifests").collect()
    assert len(manifests) <= 4
    assert any(m.existing_data_files_count for m in manifests)  # data entries merged from earlier snapshots
    snapshots = iceberg_df(iceberg_spark, latest.metadata_location, table="snapshots").orderBy("committed_at").collect()
    for row in snapshots[:1] + snapshots[-2:]:
        version = int(row.summary["delta-version"])
        delta = delta_df(iceberg_spark, path, version)
        assert_same_rows(iceberg_df(iceberg_spark, latest.metadata_location, row.snapshot_id), delta, f"v{version}")
        assert _pyiceberg_rows(latest.metadata_location, row.snapshot_id, delta) == _spark_rows(delta)
    # Every live entry carries the sequence numbers of the snapshot that added its file (its snapshot_id).
    sequence = {s.snapshot_id: s.sequence_number
                for s in StaticTable.from_metadata(latest.metadata_location).metadata.snapshots}
    entries = iceberg_df(iceberg_spark, latest.metadata_location, table="entries") \
        .selectExpr("status", "snapshot_id", "sequence_number", "file_sequence_number").collect()
    live = [e for e in entries if e.status != 2]
    assert len({e.snapshot_id for e in live}) >= 4
    for entry in live:
        assert entry.sequence_number == entry.file_sequence_number == sequence[entry.snapshot_id], entry
