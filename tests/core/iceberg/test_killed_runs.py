"""A conversion killed (SIGKILL) between writing files and publishing them: the next run goes on incrementally
from the published state, which the kill left intact, and says why whenever it converts in full (issue 26 §3
loose end). Killed at every kind of write of an incremental run of three snapshots with expiry and a catalog: the
conversion state, the manifest list, the metadata file, the version hint, expiry's metadata file, the deletes of
expired files and of metadata files that fell out of the log. Rows are read back with pyiceberg through the SQL
catalog and compared with deltalake's kernel reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from support.killed_run import calls, killed_conversion
from support.oracle import delta_rows, open_sql_catalog, rows_of, sql_catalog_config

from airflow_deltaberg.core.iceberg.convert import convert

IDENTIFIER = "db.events"
RETAIN = 2


def options(tmp_path: Path) -> dict[str, Any]:
    return {"catalog_config": sql_catalog_config(tmp_path), "identifier": IDENTIFIER, "retain_snapshots": RETAIN,
            "table_properties": {"write.metadata.previous-versions-max": "2"}}


def prepared(tmp_path: Path) -> Path:
    """A table converted up to version 1, then three more commits (an append, a delete, an append)."""
    path = tmp_path / "t"
    for i in range(2):
        write_deltalake(str(path), pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())}),
                        mode="append")
    convert(str(path), **options(tmp_path))
    write_deltalake(str(path), pa.table({"id": pa.array(range(20, 25), pa.int64())}), mode="append")
    DeltaTable(str(path)).delete("id < 3")
    write_deltalake(str(path), pa.table({"id": pa.array(range(25, 30), pa.int64())}), mode="append")
    return path


def kill_points(tmp_path: Path) -> list[tuple[str, int | str]]:
    """One kill point per kind of write, from the calls of a run that is not killed."""
    path = prepared(tmp_path / "dry")
    log = tmp_path / "dry.calls"
    assert killed_conversion(path, 0, log, **options(tmp_path / "dry")) == 0
    logged = calls(log)
    metadata = [n for n, call, key in logged if call == "write_if_absent" and key.endswith(".metadata.json")]
    points: dict[str, int | str] = {"manifest list of the 2nd snapshot": "manifest-list"}
    for n, call, key in logged:
        kind = ("state" if key.endswith(".state.arrow") else "hint" if key.endswith("version-hint.text")
                else "metadata" if key.endswith(".metadata.json") else "file")
        if call == "write_if_absent" and kind == "metadata" and n == metadata[-1]:
            kind = "expiry's metadata"
        points.setdefault(f"{call} {kind}", n)
        points.setdefault(f"{call} {kind} (2nd snapshot)" if kind in ("state", "metadata", "hint") and
                          f"{call} {kind}" in points and points[f"{call} {kind}"] != n else "", n)
    points.pop("", None)
    assert {"write_if_absent state", "write_if_absent metadata", "replace hint", "write_if_absent expiry's metadata",
            "delete file", "delete metadata"} <= set(points), logged
    return sorted(points.items(), key=lambda item: str(item[1]))


def test_the_run_after_a_kill_goes_on_incrementally(tmp_path: Path) -> None:
    points = kill_points(tmp_path)
    assert len(points) >= 8
    for name, point in points:
        case = tmp_path / name.replace(" ", "-").replace("'", "").replace("(", "").replace(")", "")
        path = prepared(case)
        assert killed_conversion(path, point, case / "calls", **options(case)) == -9, name
        result = convert(str(path), **options(case))
        assert result.mode in ("incremental", "up-to-date"), (name, result.mode, result.fall_back)
        assert result.fall_back is None, (name, result.fall_back)
        assert result.delta_version == DeltaTable(str(path)).version()
        table = open_sql_catalog(case).load_table(IDENTIFIER)
        assert table.metadata_location == result.metadata_location, name
        assert rows_of(table.scan().to_arrow()) == delta_rows(path), name
        # Every retained snapshot reads as Delta at its version.
        for snapshot in table.metadata.snapshots:
            version = int(snapshot.summary["delta-version"])
            assert rows_of(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == delta_rows(path, version)


@pytest.mark.parametrize("kind", ["upgrade", "older version"])
def test_a_full_conversion_says_why(tmp_path: Path, kind: str) -> None:
    """The full conversions an incremental one could have been: each says why in the result."""
    path = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64())}), mode="append")
    convert(str(path))
    result = convert(str(path), format_version=3) if kind == "upgrade" else convert(str(path), version=1)
    assert result.mode == "full"
    expected = "format version 2 to 3" if kind == "upgrade" else "Delta version 1 is older than the converted 2"
    assert expected in (result.fall_back or ""), result.fall_back
