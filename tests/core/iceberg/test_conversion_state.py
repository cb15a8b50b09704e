"""The conversion state beside each manifest list: an Arrow IPC file naming the Arrow IPC copies of its
manifests' entries; a state that cannot be read makes the run a full conversion."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import deltalake
import fastavro
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import StaticTable
from pyiceberg.types import StructType
from support.tables import STATE_KEY, newest_state_header

import airflow_deltaberg.core.iceberg.manifests.manifest as manifest_module
from airflow_deltaberg.core.errors import ConversionStateError
from airflow_deltaberg.core.iceberg.conversion_state import (
    ManifestRecord,
    ManifestTable,
    read_state,
    state_key,
)
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.manifests.manifest import (
    ManifestFileInfo,
    encode_manifest_list_rows,
    manifest_list_columns,
    write_manifest_list,
)
from airflow_deltaberg.core.iceberg.manifests.manifest_schema import manifest_file_type
from airflow_deltaberg.core.iceberg.publish import latest_metadata
from airflow_deltaberg.core.storage import open_storage


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": [f"p{i % 2}" for i in range(n)]})


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _current_state_file(path: Path) -> tuple[Path, str]:
    """The current snapshot's state file and manifest list."""
    storage = open_storage(str(path))
    published = latest_metadata(storage)
    assert published is not None
    manifest_list = published.metadata.snapshot_by_id(published.metadata.current_snapshot_id).manifest_list
    return path / state_key(manifest_list[len(storage.root) + 1:]), manifest_list


def _without_the_protocol(state_file: Path) -> None:
    """The state as it would be without the Delta protocol in its header."""
    table = pa.ipc.open_file(pa.py_buffer(state_file.read_bytes())).read_all()
    header = json.loads(table.schema.metadata[STATE_KEY])
    del header["delta_protocol"]
    table = table.replace_schema_metadata({STATE_KEY: json.dumps(header).encode()})
    with pa.ipc.new_file(str(state_file), table.schema) as out:
        out.write_table(table)


@pytest.mark.parametrize("damage", ["no protocol", "not arrow"])
def test_a_state_that_cannot_be_read_makes_a_full_conversion(tmp_path: Path, damage: str) -> None:
    """The run converts in full, says why (naming the state file), reads as Delta, and writes a state the next
    run goes on from incrementally."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 6), partition_by=["p"])
    convert(str(path))
    state_file, manifest_list = _current_state_file(path)
    if damage == "no protocol":
        _without_the_protocol(state_file)
    else:
        state_file.write_bytes(b"{}")
    with pytest.raises(ConversionStateError, match=state_file.name):
        read_state(open_storage(str(path)), manifest_list)
    write_deltalake(str(path), _rows(10, 4), mode="append", partition_by=["p"])

    result = convert(str(path))

    assert result.mode == "full" and result.delta_version == 1
    assert result.fall_back is not None and state_file.name in result.fall_back and "cannot be read" in result.fall_back
    table = StaticTable.from_metadata(result.metadata_location)
    assert _ids(table.scan().to_arrow()) == _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())
    assert "delta_protocol" in newest_state_header(path)
    write_deltalake(str(path), _rows(20, 4), mode="append", partition_by=["p"])
    assert convert(str(path)).mode == "incremental"


def test_a_manifest_left_with_deleted_entries_only_is_dropped_from_the_next_snapshot(tmp_path: Path) -> None:
    """The snapshot that deletes every file of a manifest lists it with DELETED entries; the next one drops it."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 4))
    assert convert(str(path)).mode == "full"
    write_deltalake(str(path), _rows(10, 4), mode="append")
    convert(str(path))
    deltalake.DeltaTable(str(path)).delete("id < 10")  # every row of the first file: its remove, no add
    deleting = convert(str(path))
    write_deltalake(str(path), _rows(20, 4), mode="append")
    after = convert(str(path))

    def manifest_rows(location: str) -> list[tuple[int, int, int]]:
        table = StaticTable.from_metadata(location)
        files = table.current_snapshot().manifests(table.io)
        return sorted((m.added_files_count, m.existing_files_count, m.deleted_files_count) for m in files)

    assert (0, 0, 1) in manifest_rows(deleting.metadata_location)
    assert manifest_rows(after.metadata_location) == [(1, 0, 0), (1, 0, 0)]
    for result, version, totals in ((deleting, 2, ("1", "4")), (after, 3, ("2", "8"))):
        table = StaticTable.from_metadata(result.metadata_location)
        delta = deltalake.DeltaTable(str(path), version=version).to_pyarrow_table()
        assert _ids(table.scan().to_arrow()) == _ids(delta)
        summary = table.current_snapshot().summary
        assert (summary["total-data-files"], summary["total-records"]) == totals


# ------------------------------------------------------------------------- rows carried over, not re-encoded


def _avro(location: str) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
    with open(location.removeprefix("file://"), "rb") as f:
        reader = fastavro.reader(f)
        return dict(reader.metadata), list(reader)


def _check_manifest_list(path: Path, tmp_path: Path, format_version: int) -> int:
    """The current snapshot's manifest list (rows carried over from earlier snapshots and rows encoded by this one)
    equals the list written afresh from the state's records, read with fastavro and with pyiceberg; the state's
    encoded rows are those a fresh encoding gives. Returns how many manifests it lists."""
    storage = open_storage(str(path))
    published = latest_metadata(storage)
    assert published is not None
    snapshot = published.metadata.snapshot_by_id(published.metadata.current_snapshot_id)
    state = read_state(storage, snapshot.manifest_list)
    assert state is not None and state.manifests.list_rows_version == format_version
    infos = [record.info for record in state.manifests]
    fresh = encode_manifest_list_rows(manifest_list_columns(infos, format_version), len(infos), format_version)
    assert state.manifests.list_rows.to_pylist() == fresh.to_pylist()
    again = tmp_path / f"fresh-{snapshot.snapshot_id}.avro"
    first_row_id = snapshot.first_row_id if format_version >= 3 else None
    write_manifest_list(str(again), infos, snapshot.snapshot_id, snapshot.parent_snapshot_id,
                        snapshot.sequence_number, format_version=format_version, first_row_id=first_row_id)
    written_meta, written = _avro(snapshot.manifest_list)
    fresh_meta, fresh_rows = _avro(str(again))
    assert written == fresh_rows and len(written) == len(infos)
    assert {k: v for k, v in written_meta.items() if k != "avro.sync"} == \
        {k: v for k, v in fresh_meta.items() if k != "avro.sync"}
    io = PyArrowFileIO()
    assert [m.manifest_path for m in snapshot.manifests(io)] == [i.manifest_path for i in infos]
    fresh_snapshot = snapshot.model_copy(update={"manifest_list": str(again)})
    assert snapshot.manifests(io) == fresh_snapshot.manifests(io)
    return len(infos)


@pytest.mark.parametrize("format_version", [2, 3])
def test_carried_manifest_list_rows_equal_fresh_ones(tmp_path: Path, format_version: int) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 6), partition_by=["p"])
    convert(str(path), format_version=format_version)
    counts = [_check_manifest_list(path, tmp_path, format_version)]
    for start in (10, 20, 30):  # appends: each snapshot adds a manifest and carries the others' rows over
        write_deltalake(str(path), _rows(start, 4), mode="append", partition_by=["p"])
        assert convert(str(path)).mode == "incremental"
        counts.append(_check_manifest_list(path, tmp_path, format_version))
    deltalake.DeltaTable(str(path)).delete("id % 10 = 1")  # rewrites the manifests holding the removed files
    result = convert(str(path))
    assert result.mode == "incremental" and result.files_removed > 0
    counts.append(_check_manifest_list(path, tmp_path, format_version))
    assert counts[:4] == [1, 2, 3, 4] and counts[4] >= 4
    table = StaticTable.from_metadata(result.metadata_location)
    assert _ids(table.scan().to_arrow()) == _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())


def test_an_append_encodes_only_the_new_manifests_list_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An incremental snapshot encodes the manifest-list rows of the manifests it adds, not of those it keeps."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0, 6), partition_by=["p"])
    convert(str(path))
    for start in (10, 20, 30):
        write_deltalake(str(path), _rows(start, 4), mode="append", partition_by=["p"])
        convert(str(path))
    encoded: list[int] = []
    original = manifest_module.encode_rows

    def counting(struct: StructType, columns: Any, n: int) -> pa.BinaryArray:
        if struct in (manifest_file_type(2), manifest_file_type(3)):
            encoded.append(n)
        return original(struct, columns, n)

    monkeypatch.setattr(manifest_module, "encode_rows", counting)
    write_deltalake(str(path), _rows(40, 4), mode="append", partition_by=["p"])
    result = convert(str(path))
    assert result.mode == "incremental"
    assert sum(encoded) == 1  # the one new manifest; the four kept are copied
    monkeypatch.undo()
    assert _check_manifest_list(path, tmp_path, 2) == 5


def test_candidates_are_the_records_whose_path_range_holds_a_path() -> None:
    """ManifestTable.candidates, for all manifests at once, says what ManifestRecord.may_contain says of each."""
    rng = random.Random(7)
    words = ["a", "b/c", "b/d", "é", "z", "ü/x", "ab", "b", "zz", "~"]
    records = []
    for i in range(60):
        low, high = sorted(rng.sample(words, 2))
        if i % 7 == 0:
            low = high = None
        info = ManifestFileInfo(f"m{i}", 1, 0, i % 2, 1, 0, 0, 0, 0, 0, 0, 1, 1)
        records.append(ManifestRecord(info, f"e{i}", low, high))
    table = ManifestTable.from_records(records)
    for _ in range(50):
        paths = pa.array(rng.sample(words, rng.randint(0, 4)) + [None] * rng.randint(0, 1), pa.string())
        for content in (0, 1):
            expected = [i for i, r in enumerate(records) if r.info.content == content and r.may_contain(paths)]
            assert table.candidates(content, paths) == expected
    assert list(table) == records  # the rows give back the records
