"""A data file that materializes its partition column with other values than its add gives (fuzz seed 8 case 6990):
Delta readers take the add's value, Iceberg readers the file's (table spec, Column Projection). validate's
data.stats-cover-data reports it and convert --verify-stats refuses it; a file that agrees is no finding."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from support.delta_log import commit_file, edit_commit, read_actions

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.compat.model import Location
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert

RULE = "data.stats-cover-data"


def _materialized(tmp_path: Path, held: int | None, logged: str | None) -> tuple[Path, str]:
    """A deltalake table partitioned by ``part`` whose one data file is rewritten holding ``part`` = ``held``, its
    add saying ``logged`` (its size updated)."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64()), "part": pa.array([7, 7], pa.int64())}),
                    partition_by=["part"])
    path = next(a["add"]["path"] for a in read_actions(commit_file(root, 0)) if "add" in a)
    data_file = root / path
    rows = pq.read_table(data_file, partitioning=None)
    pq.write_table(rows.append_column("part", pa.array([held] * rows.num_rows, pa.int64())), data_file)

    def change(actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                action["add"]["partitionValues"] = {"part": logged}
                action["add"]["size"] = data_file.stat().st_size

    edit_commit(root, 0, change)
    return root, path


@pytest.mark.parametrize(("held", "logged", "wrong"), [
    (7, "7", None),
    (None, None, None),
    (2, None, "partition column part: the add gives null, the file holds 2"),
    (2, "7", "partition column part: the add gives 7, the file holds 2"),
    (None, "7", "partition column part: the add gives 7, the file holds null"),
], ids=["same", "both-null", "null-vs-2", "7-vs-2", "7-vs-null"])
def test_materialized_partition_values_are_checked(held: int | None, logged: str | None, wrong: str | None,
                                                    tmp_path: Path) -> None:
    root, path = _materialized(tmp_path, held, logged)
    found = [v for v in validate(str(root), "compat-v2", data_checks=True, sample_size=None).violations
             if v.rule_id == RULE]
    if wrong is None:
        assert found == []
        assert convert(str(root), verify_stats=True).files_added == 1
        return
    assert [v.location for v in found] == [Location("file", path)] and wrong in found[0].message
    with pytest.raises(StatsMismatchError, match=wrong):
        convert(str(root), verify_stats=True)
    assert not (root / "_iceberg").exists()
