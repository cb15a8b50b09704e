"""Nothing is written through a link that resolves outside the table root (issue 26 §5): ``_iceberg`` or
``_iceberg/metadata`` linked elsewhere put every Iceberg file at the target, and linked into another table's
``_iceberg``, converting one table overwrote the other's ``v2.metadata.json`` and version hint."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import delta_rows, rows_of

from airflow_deltaberg.core.errors import LinkOutsideTableError
from airflow_deltaberg.core.iceberg.convert import convert


def _table(path: Path, start: int, commits: int = 1) -> Path:
    for i in range(commits):
        write_deltalake(str(path), pa.table({"id": pa.array(range(start + 10 * i, start + 10 * i + 3), pa.int64())}),
                        mode="append")
    return path


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(table: Path, link: Path) -> None:
    with pytest.raises(LinkOutsideTableError) as info:
        convert(str(table))
    assert str(table) in str(info.value) and str(link) in str(info.value)


def test_iceberg_folder_linked_elsewhere(tmp_path: Path) -> None:
    table = _table(tmp_path / "a", 0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, table / "_iceberg")
    _refused(table, table / "_iceberg")
    assert list(elsewhere.rglob("*")) == []


def test_metadata_folder_linked_elsewhere(tmp_path: Path) -> None:
    table = _table(tmp_path / "a", 0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (table / "_iceberg").mkdir()
    os.symlink(elsewhere, table / "_iceberg" / "metadata")
    _refused(table, table / "_iceberg" / "metadata")
    assert list(elsewhere.rglob("*")) == []
    assert [p.name for p in (table / "_iceberg").iterdir()] == ["metadata"]


def test_linked_into_another_tables_iceberg_leaves_it_unchanged(tmp_path: Path) -> None:
    victim = _table(tmp_path / "v", 100, commits=2)
    first = convert(str(victim))
    before = _files(victim / "_iceberg")
    table = _table(tmp_path / "a", 0, commits=2)
    os.symlink(victim / "_iceberg", table / "_iceberg")
    _refused(table, table / "_iceberg")
    assert _files(victim / "_iceberg") == before
    assert rows_of(StaticTable.from_metadata(first.metadata_location).scan().to_arrow()) == delta_rows(victim)


def test_a_link_that_stays_inside_the_table_is_followed(tmp_path: Path) -> None:
    table = _table(tmp_path / "a", 0)
    (table / "iceberg-folder").mkdir()
    os.symlink(table / "iceberg-folder", table / "_iceberg")
    result = convert(str(table))
    assert (table / "iceberg-folder" / "metadata" / "v1.metadata.json").is_file()
    assert rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow()) == delta_rows(table)


def test_a_dangling_link_is_refused_before_its_target_is_created(tmp_path: Path) -> None:
    table = _table(tmp_path / "a", 0)
    target = tmp_path / "not-yet"
    os.symlink(target, table / "_iceberg")
    _refused(table, table / "_iceberg")
    assert not target.exists()
