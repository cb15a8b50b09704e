"""The conversion state's copy of a manifest's entries keeps no stats, only where each entry's row starts: a
removal rewrites a manifest from the manifest's own bytes. The stats of the entries carried on must be the very
bytes written first, and a manifest that does not match its copy must be refused, not mixed: the conversion then goes
on as a full one, which writes manifests and state again from the Delta log."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.manifests import written_manifests

from airflow_deltaberg.core.errors import AvroContainerError, ConversionStateError
from airflow_deltaberg.core.iceberg.avro.avro_container import AvroContainerWriter, read_rows
from airflow_deltaberg.core.iceberg.conversion_state import ManifestRecord, read_entries, read_state
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.manifests.manifest_rows import KEPT_COLUMNS, ROW_START
from airflow_deltaberg.core.storage import Storage, open_storage


def _batch(first: int) -> pa.Table:
    ids = list(range(first, first + 3))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": [f"name-{i:03d}" for i in ids],
        "score": pa.array([i * 1.5 - 7 for i in ids], pa.float64()),
        "at": pa.array([dt.datetime(2024, 1, 1 + i % 28, 12, tzinfo=dt.timezone.utc) for i in ids],
                       pa.timestamp("us", tz="UTC")),
    })


def _table(path: Path) -> None:
    """Four appends of three rows: four data files with stats, in one manifest after a full conversion."""
    for k in range(4):
        write_deltalake(str(path), _batch(10 * k), mode="append")


def _entries(path: Path, metadata_location: str) -> dict[str, dict[str, Any]]:
    """Every entry of the current snapshot's manifests read by fastavro, in manifest order, by data file path."""
    return {entry["data_file"]["file_path"]: entry
            for manifest in written_manifests(metadata_location, path) for entry in manifest["entries"]}


def _ids(location: str) -> list[int]:
    return sorted(StaticTable.from_metadata(location).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_rewritten_manifest_carries_every_entry_byte_for_byte(tmp_path: Path, format_version: int) -> None:
    path = tmp_path / "t"
    _table(path)
    first = convert(str(path), format_version=format_version)
    before = _entries(path, first.metadata_location)
    copies = list((path / "_iceberg" / "metadata").glob("*.entries.arrow"))
    assert copies
    for copy in copies:
        names = pa.ipc.open_file(pa.py_buffer(copy.read_bytes())).schema.names
        assert set(names) <= {*KEPT_COLUMNS, ROW_START} and "lower_bounds" not in names

    deltalake.DeltaTable(str(path)).delete("id = 21")
    result = convert(str(path))

    assert result.mode == "incremental" and result.files_removed == 1
    assert _ids(result.metadata_location) == sorted(deltalake.DeltaTable(str(path)).to_pyarrow_table()
                                                   .column("id").to_pylist())
    after = _entries(path, result.metadata_location)
    carried = {p: e for p, e in after.items() if p in before}
    assert sorted(e["status"] for e in carried.values()) == [0, 0, 0, 2]  # three EXISTING, one DELETED
    row_id = 0
    for file_path, entry in before.items():  # in manifest order: row ids are inherited in that order
        old, new = dict(entry["data_file"]), dict(carried[file_path]["data_file"])
        assert old["lower_bounds"] and old["upper_bounds"] and old["null_value_counts"]  # what must survive
        if format_version >= 3:
            # Written out on the rewrite: the id the entry inherited in the first manifest (row lineage).
            assert old["first_row_id"] is None and new["first_row_id"] == row_id
            row_id += old["record_count"]
            old.pop("first_row_id"), new.pop("first_row_id")
        assert new == old


def _first_manifest_and_copy(path: Path) -> tuple[Path, Path]:
    (copy,) = (path / "_iceberg" / "metadata").glob("*.entries.arrow")
    return copy.with_name(copy.name.removesuffix(".entries.arrow") + ".avro"), copy


def _state_record(path: Path, metadata_location: str, manifest: Path) -> tuple[Storage, ManifestRecord]:
    """The table's storage, and the current snapshot's conversion-state record of ``manifest``."""
    storage = open_storage(str(path))
    current = StaticTable.from_metadata(metadata_location).current_snapshot()
    assert current is not None
    state = read_state(storage, current.manifest_list)
    assert state is not None
    (record,) = [r for r in state.manifests if Path(r.info.manifest_path).name == manifest.name]
    return storage, record


def _read_entries_refuses(path: Path, metadata_location: str, manifest: Path) -> None:
    """Reading the damaged manifest's entries through the conversion state is refused, naming the manifest."""
    storage, record = _state_record(path, metadata_location, manifest)
    with pytest.raises(ConversionStateError, match=manifest.name):
        read_entries(storage, record)


def _falls_back_to_full(path: Path, metadata_location: str, manifest: Path) -> None:
    """A removal that meets the damaged manifest goes on as a full conversion: new manifests from the Delta log,
    Delta's rows, and the damaged manifest no longer in the current snapshot."""
    _read_entries_refuses(path, metadata_location, manifest)
    deltalake.DeltaTable(str(path)).delete("id = 21")
    result = convert(str(path))
    assert result.mode == "full"
    assert _ids(result.metadata_location) == sorted(deltalake.DeltaTable(str(path)).to_pyarrow_table()
                                                   .column("id").to_pylist())
    current = StaticTable.from_metadata(result.metadata_location).current_snapshot()
    assert current is not None
    assert manifest.name not in {Path(m.manifest_path).name for m in
                                 current.manifests(StaticTable.from_metadata(result.metadata_location).io)}


def test_a_truncated_manifest_is_refused_and_the_conversion_goes_full(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path)
    first = convert(str(path))
    manifest, _ = _first_manifest_and_copy(path)
    manifest.write_bytes(manifest.read_bytes()[:-20])
    _falls_back_to_full(path, first.metadata_location, manifest)


def test_a_manifest_gone_is_refused_and_the_conversion_goes_full(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path)
    first = convert(str(path))
    manifest, _ = _first_manifest_and_copy(path)
    manifest.unlink()
    _falls_back_to_full(path, first.metadata_location, manifest)


def test_a_copy_that_names_another_file_is_refused_and_the_conversion_goes_full(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path)
    first = convert(str(path))
    manifest, copy = _first_manifest_and_copy(path)
    index = pa.ipc.open_file(pa.py_buffer(copy.read_bytes())).read_all()
    paths = index.column("file_path").to_pylist()
    paths[1] = paths[1].replace("part-", "part-x")  # same place, another name: the row's own path disagrees
    index = index.set_column(index.schema.get_field_index("file_path"), "file_path", pa.array(paths))
    with pa.ipc.new_file(str(copy), index.schema) as out:
        out.write_table(index)
    _falls_back_to_full(path, first.metadata_location, manifest)


def test_lookups_read_the_copy_alone(tmp_path: Path) -> None:
    """Looking up which files a manifest lists (re-adds, expiry) needs the copy's columns only: the manifest is not
    read, so a manifest gone or damaged does not stop them."""
    path = tmp_path / "t"
    _table(path)
    first = convert(str(path))
    manifest, _ = _first_manifest_and_copy(path)
    storage, record = _state_record(path, first.metadata_location, manifest)
    whole = read_entries(storage, record)
    manifest.unlink()

    copy = read_entries(storage, record, data_files=False)
    assert copy.column("file_path").to_pylist() == whole.column("file_path").to_pylist()
    assert copy.column("status").to_pylist() == [1, 1, 1, 1]
    assert ROW_START not in copy.column_names and "data_file_prefix" in whole.column_names
    with pytest.raises(ConversionStateError, match=f"{manifest.name}, which the conversion state lists, is gone"):
        read_entries(storage, record)


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_read_rows_gives_back_the_rows_written(codec: str) -> None:
    rng = np.random.default_rng(5)
    rows = [rng.bytes(int(n)) for n in rng.integers(0, 300, 1000)]
    out = io.BytesIO()
    with AvroContainerWriter(out, '"bytes"', {"k": "v"}, codec=codec, threads=2) as writer:
        writer.write_rows(pa.array(rows, pa.binary()), block_rows=64)
    read = read_rows(out.getvalue())
    assert read.count == 1000 and read.metadata["k"] == b"v" and read.payload == b"".join(rows)


def test_read_rows_refuses_a_damaged_file() -> None:
    out = io.BytesIO()
    with AvroContainerWriter(out, '"bytes"', codec="deflate") as writer:
        writer.write_rows(pa.array([b"x" * 100] * 10, pa.binary()), block_rows=4)
    data = out.getvalue()
    with pytest.raises(AvroContainerError, match="truncated"):
        read_rows(data[:-3])
    with pytest.raises(AvroContainerError, match="sync marker"):
        read_rows(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(AvroContainerError, match="not an Avro"):
        read_rows(b"PAR1" + data[4:])
