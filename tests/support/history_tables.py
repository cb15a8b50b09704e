"""Delta tables with a history for the expiry tests (tests/core/iceberg/test_history.py, and Iceberg Java's side
in tests/spark/test_history_iceberg_java.py), and the snapshots a conversion kept."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
from deltalake import write_deltalake
from pyiceberg.table import StaticTable

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_VERSION


def id_rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"v{i}" for i in range(n)]})


def retained_versions(location: str) -> dict[int, int]:
    """Delta version -> snapshot id of every snapshot of the metadata file."""
    table = StaticTable.from_metadata(location)
    return {int(s.summary[DELTA_VERSION]): s.snapshot_id for s in table.metadata.snapshots}


def vacuumed_history(path: Path) -> list[int]:
    """Five commits converted one by one (create, append, delete of the first file's rows, overwrite, append),
    then VACUUM with no retention: the files the delete and the overwrite removed are gone."""
    write_deltalake(str(path), id_rows(0, 4))
    convert(str(path))
    write_deltalake(str(path), id_rows(10, 4), mode="append")
    convert(str(path))
    deltalake.DeltaTable(str(path)).delete("id < 2")
    convert(str(path))
    write_deltalake(str(path), id_rows(20, 4), mode="overwrite")
    convert(str(path))
    write_deltalake(str(path), id_rows(30, 4), mode="append")
    convert(str(path))
    removed = deltalake.DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                     dry_run=False)
    assert removed
    return [0, 1, 2, 3, 4]
