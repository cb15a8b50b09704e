"""Metadata bounded over a table's life (issue 26 §2): an incremental conversion merges small manifests as Iceberg's
merge-append does (``core/iceberg/manifests/manifest_merge.py``), so a
table converted after every commit lists a bounded
number of manifests, its conversion states stay the same size, and a merged manifest's entries keep the snapshot
ids and sequence numbers they were added with; the metadata files kept follow the table's
``write.metadata.previous-versions-max``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import fastavro
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from support.oracle import assert_same_rows, kernel_arrow
from support.tables import Appender

from airflow_deltaberg.core.errors import TablePropertyError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.manifests import file_manifests, manifest_merge
from airflow_deltaberg.core.iceberg.manifests.manifest_merge import DEFAULT_MIN_COUNT
from airflow_deltaberg.core.iceberg.table_properties import DEFAULT_PREVIOUS_VERSIONS

#: Each test's table is appended to through one kept DeltaTable (its paths are the test's own).
_appender = Appender()


def _append(path: Path, i: int) -> None:
    # Numbers only: pyiceberg cannot join the string columns of deltalake's rewritten files (string_view) to those of
    # its appended ones (string).
    rows = pa.table({"id": pa.array([i], pa.int64()), "p": pa.array([i % 3], pa.int32()),
                     "v": pa.array([i], pa.int64())})
    _appender(path, rows)


def _iceberg(result: ConversionResult) -> StaticTable:
    return StaticTable.from_metadata(result.metadata_location)


def _manifests(result: ConversionResult) -> list[Any]:
    table = _iceberg(result)
    return table.current_snapshot().manifests(table.io)


def _assert_rows_equal_delta(path: Path, result: ConversionResult) -> None:
    assert_same_rows(_iceberg(result).scan().to_arrow(), kernel_arrow(path), f"version {result.delta_version}")


def _state_sizes(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (path / "_iceberg" / "metadata").glob("*.state.arrow")}


def test_one_file_appends_keep_a_bounded_manifest_count_and_state_size(tmp_path: Path) -> None:
    """40 one-file appends converted one by one: the current snapshot never lists more than min-count - 1 small
    manifests (40 before merging), its rows are Delta's, and each run's conversion state is as small at the 40th run
    as at the 10th (each listed every manifest before: the states' total grew with the commits squared)."""
    path = tmp_path / "appends"
    counts, state_bytes = [], []
    for i in range(40):
        _append(path, i)
        before = _state_sizes(path)
        result = convert(str(path))
        assert result.mode == ("full" if i == 0 else "incremental")
        counts.append(len(_manifests(result)))
        new = set(_state_sizes(path)) - set(before)
        state_bytes.append(sum(_state_sizes(path)[n] for n in new))
        if i % 13 == 0 or i == 39:
            _assert_rows_equal_delta(path, result)
    assert max(counts) <= DEFAULT_MIN_COUNT - 1
    assert counts[-1] < 40
    # Every manifest in the folder is one a snapshot lists (those written and merged in one run are deleted).
    table = _iceberg(result)
    listed = {m.manifest_path.removeprefix("file://") for s in table.metadata.snapshots for m in s.manifests(table.io)}
    on_disk = {str(p) for p in (path / "_iceberg" / "metadata").glob("*-m0.avro")}
    assert on_disk == listed
    assert {p.name.removesuffix(".entries.arrow") for p in (path / "_iceberg" / "metadata").glob("*.entries.arrow")} \
        == {Path(p).name.removesuffix(".avro") for p in listed}
    # Linear: the last ten states are no bigger than the ten from run 10 on (a merge in between may leave one or two
    # more rows), where listing every manifest made them 50-60% bigger.
    assert sum(state_bytes[30:]) <= 1.1 * sum(state_bytes[10:20])


def _entry_rows(table: StaticTable, snapshot_id: int | None = None) -> dict[str, dict[str, Any]]:
    entries = table.inspect.entries(snapshot_id)
    paths = entries.column("data_file").combine_chunks().field("file_path").to_pylist()
    rows = entries.select(["status", "snapshot_id", "sequence_number", "file_sequence_number"]).to_pylist()
    return dict(zip(paths, rows, strict=True))


def test_removes_hit_merged_manifests_and_entries_keep_their_sequence_numbers(tmp_path: Path) -> None:
    """Appends merged into one manifest, then deletes and updates (copy-on-write: removes of files in the merged
    manifests, adds of rewritten ones), each converted on its own: the rows equal Delta's at every run, and every
    live entry of the current snapshot carries the snapshot id and data and file sequence numbers of the snapshot
    that added its file (Iceberg's rule for EXISTING entries, which sequence-number readers depend on)."""
    path = tmp_path / "removes"
    added: dict[str, dict[str, Any]] = {}

    def run() -> ConversionResult:
        result = convert(str(path))
        table = _iceberg(result)
        for snapshot in table.metadata.snapshots[-result.snapshots_written:]:
            for file, entry in _entry_rows(table, snapshot.snapshot_id).items():
                if entry["status"] == 1 and entry["snapshot_id"] == snapshot.snapshot_id:
                    assert entry["sequence_number"] == entry["file_sequence_number"] == snapshot.sequence_number
                    added[file] = {**entry, "status": 0}
        _assert_rows_equal_delta(path, result)
        return result

    for i in range(2 * DEFAULT_MIN_COUNT):
        _append(path, i)
        run()
    delta = deltalake.DeltaTable(str(path))
    delta.delete("id = 3")
    run()
    deltalake.DeltaTable(str(path)).update({"v": "-1"}, predicate="id >= 9")
    run()
    deltalake.DeltaTable(str(path)).delete("p = 1")
    for i in range(100, 100 + DEFAULT_MIN_COUNT):
        _append(path, i)
    result = run()  # several commits in one run
    assert result.snapshots_written == 1 + DEFAULT_MIN_COUNT
    assert len(_manifests(result)) <= DEFAULT_MIN_COUNT - 1

    table = _iceberg(result)
    current = table.current_snapshot()
    live = {file: entry for file, entry in _entry_rows(table).items() if entry["status"] != 2}
    assert len(live) == int(current.summary["total-data-files"]) == len(deltalake.DeltaTable(str(path)).file_uris())
    for file, entry in live.items():
        if entry["snapshot_id"] != current.snapshot_id:  # added by an earlier snapshot: ADDED there, or EXISTING
            assert {**entry, "status": 0} == added[file], file
    # Some entries of the current snapshot's manifests were merged from earlier snapshots (EXISTING).
    assert sum(e["status"] == 0 for e in live.values()) > DEFAULT_MIN_COUNT


def test_the_table_properties_choose_the_merging(tmp_path: Path) -> None:
    """commit.manifest-merge.enabled=false keeps every manifest (Iceberg's fast append); min-count-to-merge 3 merges
    sooner; a property the converter does not follow, or a value it cannot use, is refused before any write."""
    path = tmp_path / "props"
    _append(path, 0)
    convert(str(path), table_properties={"commit.manifest-merge.enabled": "false"})
    for i in range(1, 12):
        _append(path, i)
        result = convert(str(path))
    assert len(_manifests(result)) == 12  # the property stays on the table
    assert _iceberg(result).metadata.properties["commit.manifest-merge.enabled"] == "false"
    _append(path, 12)
    result = convert(str(path), table_properties={"commit.manifest-merge.enabled": "true",
                                                  "commit.manifest.min-count-to-merge": "3"})
    assert len(_manifests(result)) == 1  # the 13 manifests merge at once
    counts = []
    for i in range(13, 20):
        _append(path, i)
        result = convert(str(path))
        counts.append(len(_manifests(result)))
    assert max(counts) <= 2
    _assert_rows_equal_delta(path, result)

    files = sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir())
    _append(path, 20)
    for bad in ({"format-version": "3"}, {"commit.manifest.min-count-to-merge": "many"},
                {"write.metadata.delete-after-commit.enabled": "yes"}):
        with pytest.raises(TablePropertyError, match=next(iter(bad))):
            convert(str(path), table_properties=bad)
    assert sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir()) == files


def _metadata_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_iceberg" / "metadata").glob("v*.metadata.json"))


def test_previous_versions_max_is_honoured(tmp_path: Path) -> None:
    """By default the table keeps DEFAULT_PREVIOUS_VERSIONS earlier metadata files (Iceberg's 100 kept a hundred
    copies of a file that names every snapshot); a table that says otherwise keeps that many, and with
    write.metadata.delete-after-commit.enabled=false none is deleted."""
    path = tmp_path / "versions"
    for i in range(DEFAULT_PREVIOUS_VERSIONS + 5):
        _append(path, i)
        result = convert(str(path))
    assert len(_metadata_files(path)) == DEFAULT_PREVIOUS_VERSIONS + 1
    assert len(_iceberg(result).metadata.metadata_log) == DEFAULT_PREVIOUS_VERSIONS

    _append(path, 100)
    convert(str(path), table_properties={"write.metadata.previous-versions-max": "3"})
    assert len(_metadata_files(path)) == 4
    _append(path, 101)
    result = convert(str(path), table_properties={"write.metadata.delete-after-commit.enabled": "false"})
    for i in range(102, 105):
        _append(path, i)
        result = convert(str(path))
    assert len(_metadata_files(path)) == 8  # 4, and one more per run
    assert len(_iceberg(result).metadata.metadata_log) == 3
    _assert_rows_equal_delta(path, result)


def _row_ids(manifest_list: str) -> dict[str, int]:
    """Each live data file's first row id in a v3 snapshot: written out, or inherited from its manifest's first_row_id
    plus the record counts of the entries without one listed before it (table spec, "Row Lineage")."""
    out = {}
    with open(manifest_list.removeprefix("file://"), "rb") as f:
        manifests = list(fastavro.reader(f))
    for manifest in manifests:
        if manifest["content"] != 0:
            continue
        with open(manifest["manifest_path"].removeprefix("file://"), "rb") as f:
            entries = list(fastavro.reader(f))
        next_id = manifest["first_row_id"]
        for entry in entries:
            data_file = entry["data_file"]
            if entry["status"] == 2:
                continue
            if data_file["first_row_id"] is None:
                out[data_file["file_path"]] = next_id
                next_id += data_file["record_count"]
            else:
                out[data_file["file_path"]] = data_file["first_row_id"]
    return out


def test_merged_v3_manifests_keep_every_file_s_row_ids(tmp_path: Path) -> None:
    """Format version 3: a merged manifest writes out the row ids its files inherited, so a row's _row_id stays the
    same through every merge; the merged manifest takes a first_row_id from the table's next row id."""
    path = tmp_path / "v3"
    first_ids: dict[str, int] = {}
    merged = 0
    for i in range(2 * DEFAULT_MIN_COUNT + 1):
        _append(path, i)
        result = convert(str(path), format_version=3)
        table = _iceberg(result)
        snapshot = table.current_snapshot()
        ids = _row_ids(snapshot.manifest_list)
        for file, row_id in ids.items():
            assert first_ids.setdefault(file, row_id) == row_id, file
        assert len(ids) == i + 1
        merged += any(m.existing_files_count for m in _manifests(result))
        assert table.metadata.next_row_id >= max(ids.values()) + 1
    assert merged >= 2
    _assert_rows_equal_delta(path, result)


def test_manifests_a_full_conversion_wrote_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full conversion's manifests (MANIFEST_ROWS entries each; 4 here) are full: later incremental runs merge the
    small manifests beside them and never rewrite them (on a big table that would be every entry of the table in
    one run), and no merged manifest grows past that many entries."""
    monkeypatch.setattr(file_manifests, "MANIFEST_ROWS", 4)
    monkeypatch.setattr(manifest_merge, "FULL_ENTRIES", 4)
    path = tmp_path / "full"
    for i in range(9):
        _append(path, i)
    first = convert(str(path))
    full = {m.manifest_path for m in _manifests(first) if m.added_files_count == 4}
    assert len(full) == 2
    for i in range(9, 9 + 3 * DEFAULT_MIN_COUNT):
        _append(path, i)
        result = convert(str(path))
        manifests = _manifests(result)
        assert full <= {m.manifest_path for m in manifests}
        assert all(m.added_files_count + m.existing_files_count <= 4 for m in manifests)
    assert any(m.existing_files_count for m in manifests)  # the small ones merged
    _assert_rows_equal_delta(path, result)


def test_a_big_manifest_waits_until_the_small_ones_hold_an_eighth_of_its_entries(tmp_path: Path) -> None:
    """The short bin's big oldest manifest (here a full conversion's 96 entries) is left out of the merge while it
    holds more than TIER_RATIO times the others' entries: the 7 small manifests merge alone (before, all 96 entries
    were rewritten every min-count commits); once the others hold 13 entries it merges with them."""
    path = tmp_path / "tiers"
    for i in range(96):
        _append(path, i)
    (big,) = {m.manifest_path for m in _manifests(convert(str(path)))}
    seen = []
    for i in range(96, 96 + 2 * (DEFAULT_MIN_COUNT - 1)):
        _append(path, i)
        result = convert(str(path))
        manifests = _manifests(result)
        assert len(manifests) <= DEFAULT_MIN_COUNT
        seen.append(big in {m.manifest_path for m in manifests})
        if i == 96 + DEFAULT_MIN_COUNT - 2:  # the first merge: 7 small manifests, 7 entries
            assert seen[-1] and len(manifests) == 2
            assert sorted(m.added_files_count + m.existing_files_count for m in manifests) == [7, 96]
    assert not seen[-1]  # the second merge (13 entries beside its 96) rewrote it
    assert sum(m.added_files_count + m.existing_files_count for m in _manifests(result)) == 96 + 14
    _assert_rows_equal_delta(path, result)
