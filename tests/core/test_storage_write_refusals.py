"""Writes the local disk refuses (full, read-only) end a conversion with a typed, non-retryable StorageError that
names the file, whichever writer meets them (pyarrow's streams for manifests, manifest lists and spill files, or
Storage's own writes); once the disk is usable again a conversion reads as Delta does.

The disks are small tmpfs mounts (support.small_disk: root only; elsewhere these tests skip, saying so).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import delta_rows, rows_of
from support.small_disk import fill, make_read_only, small_disk

from airflow_deltaberg.core.errors import StorageError, StorageWriteRefusedError
from airflow_deltaberg.core.iceberg.convert import convert


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk") as folder:
        yield folder


def _table(path: Path) -> Path:
    for start in (0, 3):
        write_deltalake(str(path), pa.table({"id": pa.array(range(start, start + 3), pa.int64())}), mode="append")
    return path


def _assert_refused(error: StorageError, table: Path) -> None:
    assert isinstance(error, StorageWriteRefusedError) and not error.retryable
    assert f"{table}/_iceberg" in str(error) or "spill" in str(error), str(error)


def _iceberg_rows(table: Path) -> list:
    hint = (table / "_iceberg/metadata/version-hint.text").read_text().strip()
    scan = StaticTable.from_metadata(str(table / f"_iceberg/metadata/v{hint}.metadata.json")).scan().to_arrow()
    return rows_of(scan)


def test_a_full_disk_is_refused_typed_then_a_conversion_converges(disk: Path) -> None:
    table = _table(disk / "t")
    filler = fill(disk)
    with pytest.raises(StorageError) as info:
        convert(str(table))
    _assert_refused(info.value, table)
    assert "No space left" in str(info.value)
    filler.unlink()
    convert(str(table))
    assert _iceberg_rows(table) == delta_rows(table)


def test_a_full_spill_folder_is_refused_typed(disk: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process engine spills a full conversion's files to TMPDIR: a full one ends typed too."""
    table = _table(tmp_path / "t")
    monkeypatch.setattr(tempfile, "tempdir", str(disk))
    fill(disk)
    with pytest.raises(StorageError) as info:
        convert(str(table))
    _assert_refused(info.value, table)
    assert not (table / "_iceberg/metadata/version-hint.text").exists()


def test_a_read_only_table_folder_is_refused_typed(disk: Path) -> None:
    table = _table(disk / "t")
    make_read_only(disk)
    with pytest.raises(StorageError) as info:
        convert(str(table))
    _assert_refused(info.value, table)
    assert "Read-only" in str(info.value)
