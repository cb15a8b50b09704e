"""History that stays readable (issue 26 §3): every snapshot a conversion keeps reads as Delta's version does.

Snapshots whose files Delta's VACUUM removed, or whose version left the log, expire by default; the name mapping
covers the columns of every retained schema (an overwrite with another schema, a RESTORE past an added column); a
column whose type changes incompatibly gets a new field id. pyiceberg reads each snapshot here; Iceberg Java in
tests/spark/test_history_iceberg_java.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import commit_file, read_actions, write_commit
from support.history_tables import id_rows, retained_versions, vacuumed_history
from support.oracle import assert_same_rows, kernel_arrow
from support.tables import iceberg_files, write_compliant_table

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import StorageTimeoutError, TypeChangeRefusedError, UnsupportedTypeError
from airflow_deltaberg.core.iceberg import history
from airflow_deltaberg.core.iceberg.convert import convert


def assert_every_snapshot_reads_delta(path: Path, location: str) -> dict[int, int]:
    """pyiceberg reads every snapshot of ``location`` as deltalake reads its Delta version."""
    table = StaticTable.from_metadata(location)
    kept = retained_versions(location)
    for version, snapshot_id in kept.items():
        assert_same_rows(table.scan(snapshot_id=snapshot_id).to_arrow(), kernel_arrow(path, version), f"v{version}")
    return kept


@pytest.mark.parametrize("options", [{}, {"retain_snapshots": 10}])
def test_snapshots_whose_files_vacuum_removed_expire(tmp_path: Path, options: dict[str, Any]) -> None:
    path = tmp_path / "vacuumed"
    vacuumed_history(path)
    result = convert(str(path), **options)
    # Versions 0-2 read files the delete or the overwrite removed; 3 (the overwrite) and 4 read live files only
    # (deltalake's VACUUM commits no file actions).
    kept = assert_every_snapshot_reads_delta(path, result.metadata_location)
    assert set(kept) >= {3, 4} and not set(kept) & {0, 1, 2}
    assert result.snapshots_expired == 3


def test_a_snapshot_keeps_what_vacuum_left_it(tmp_path: Path) -> None:
    """Only snapshots that read a removed file expire: one that read only files still live stays."""
    path = tmp_path / "kept"
    write_deltalake(str(path), id_rows(0, 4))
    convert(str(path))
    write_deltalake(str(path), id_rows(10, 4), mode="append")
    convert(str(path))
    deltalake.DeltaTable(str(path)).delete("id >= 10")  # removes the file of version 1 only
    convert(str(path))
    deltalake.DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    result = convert(str(path))
    kept = assert_every_snapshot_reads_delta(path, result.metadata_location)
    assert sorted(kept)[:1] == [0] and 1 not in kept


def test_snapshots_whose_version_left_the_log_retention_expire(tmp_path: Path) -> None:
    path = tmp_path / "retention"
    write_deltalake(str(path), id_rows(0, 2), configuration={"delta.logRetentionDuration": "interval 1 hours"})
    for start in (10, 20):
        write_deltalake(str(path), id_rows(start, 2), mode="append")
    two_hours_ago = time.time() - 2 * 3600
    for version in (0, 1):  # the commit times Delta reads (no in-commit timestamps)
        os.utime(path / "_delta_log" / f"{version:020d}.json", (two_hours_ago, two_hours_ago))
    convert(str(path), version=0)
    convert(str(path), version=1)
    result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [2]


def test_snapshots_of_versions_the_log_cannot_rebuild_expire(tmp_path: Path) -> None:
    path = tmp_path / "cleaned"
    write_deltalake(str(path), id_rows(0, 2))
    convert(str(path))
    for start in (10, 20):
        write_deltalake(str(path), id_rows(start, 2), mode="append")
        convert(str(path))
    deltalake.DeltaTable(str(path)).create_checkpoint()  # at version 2
    for version in (0, 1):  # log cleanup
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    write_deltalake(str(path), id_rows(30, 2), mode="append")
    result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [2, 3]


def test_a_default_bound_on_the_snapshots_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "DEFAULT_MAX_SNAPSHOTS", 3)
    path = tmp_path / "bounded"
    write_deltalake(str(path), id_rows(0, 2))
    convert(str(path))
    for start in range(10, 60, 10):
        write_deltalake(str(path), id_rows(start, 2), mode="append")
        result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [3, 4, 5]
    # An explicit count still wins over the default.
    write_deltalake(str(path), id_rows(60, 2), mode="append")
    result = convert(str(path), retain_snapshots=5)
    assert sorted(retained_versions(result.metadata_location)) == [3, 4, 5, 6]


def test_the_snapshot_bound_is_a_table_property_a_conversion_sets(tmp_path: Path) -> None:
    """``deltaberg.history.max-snapshots`` given once (CLI ``--table-property``) stays on the table for later runs."""
    path = tmp_path / "property"
    write_deltalake(str(path), id_rows(0, 2))
    convert(str(path), table_properties={"deltaberg.history.max-snapshots": "3"})
    for start in range(10, 60, 10):
        write_deltalake(str(path), id_rows(start, 2), mode="append")
        result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [3, 4, 5]


def name_mapping(location: str) -> list[dict[str, Any]]:
    metadata = json.loads(Path(location).read_text())
    return json.loads(metadata["properties"]["schema.name-mapping.default"])


def test_earlier_snapshots_read_their_columns_after_an_overwrite_with_another_schema(tmp_path: Path) -> None:
    path = tmp_path / "overwritten"
    write_deltalake(str(path), id_rows(0, 3))
    convert(str(path))
    write_deltalake(str(path), id_rows(10, 3), mode="append")
    convert(str(path))
    other = pa.table({"key": pa.array([1, 2], pa.int32()), "amount": pa.array([1.5, 2.5], pa.float64())})
    write_deltalake(str(path), other, mode="overwrite", schema_mode="overwrite")
    result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [0, 1, 2]
    names = [n for f in name_mapping(result.metadata_location) for n in f["names"]]
    assert {"id", "v", "key", "amount"} <= set(names) and len(names) == len(set(names))


def test_earlier_snapshots_read_an_added_column_after_a_restore_past_it(tmp_path: Path) -> None:
    path = tmp_path / "restored"
    write_deltalake(str(path), id_rows(0, 3))
    convert(str(path))
    wider = id_rows(10, 3).append_column("extra", pa.array([1.0, 2.0, 3.0], pa.float64()))
    write_deltalake(str(path), wider, mode="append", schema_mode="merge")
    convert(str(path))
    deltalake.DeltaTable(str(path)).restore(0)
    result = convert(str(path))
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [0, 1, 2]


def test_a_column_whose_type_changes_incompatibly_gets_a_new_field_id(tmp_path: Path) -> None:
    path = tmp_path / "retyped"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64()), "x": [1.5, 2.5]}))
    first = convert(str(path))
    write_deltalake(str(path), pa.table({"id": pa.array([3], pa.int64()), "x": ["three"]}), mode="overwrite",
                    schema_mode="overwrite")
    result = convert(str(path))
    ids = {}
    for location in (first.metadata_location, result.metadata_location):
        schema = StaticTable.from_metadata(location).schema()
        ids[location] = (schema.find_field("id").field_id, schema.find_field("x").field_id)
    assert ids[first.metadata_location][0] == ids[result.metadata_location][0]
    assert ids[first.metadata_location][1] != ids[result.metadata_location][1]
    # The snapshot of the double column cannot be read by name any more (the name is the string column's): it
    # expires; what stays reads as Delta.
    assert sorted(assert_every_snapshot_reads_delta(path, result.metadata_location)) == [1]


def test_a_type_change_under_column_mapping_is_refused_naming_the_column(tmp_path: Path) -> None:
    """Column mapping pins the field id to Delta's: a new id is not ours to give, so the change is refused."""
    path = write_compliant_table(tmp_path / "pinned")
    convert(str(path))
    before = iceberg_files(path)
    metadata = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    schema = json.loads(metadata["schemaString"])
    schema["fields"][1]["type"] = "double"  # "name", column id 2: string -> double
    metadata["schemaString"] = json.dumps(schema)
    write_commit(path, [{"metaData": metadata}], read_version=0, operation="CHANGE COLUMN")
    with pytest.raises(TypeChangeRefusedError) as refused:
        convert(str(path))
    message = str(refused.value)
    assert "column name" in message and "version 1" in message and str(path) in message
    assert iceberg_files(path) == before


def test_an_append_only_history_reads_no_commit_for_the_vacuum_check(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshots of appends say their commits removed nothing: a run of an append-only table reads only the
    commits it converts (cost flat over the table's life)."""
    path = tmp_path / "appends"
    write_deltalake(str(path), id_rows(0, 2))
    convert(str(path))
    for start in (10, 20, 30):
        write_deltalake(str(path), id_rows(start, 2), mode="append")
        convert(str(path))
    read: list[tuple[int, int | None]] = []
    commits = DeltaTable.commits

    def counting(self: DeltaTable, start: int, end: int | None = None, **kwargs: Any) -> Any:
        read.append((start, end))
        return commits(self, start, end, **kwargs)

    monkeypatch.setattr(DeltaTable, "commits", counting)
    assert convert(str(path)).mode == "up-to-date" and read == []
    deltalake.DeltaTable(str(path)).delete("id = 10")
    assert convert(str(path)).snapshots_written == 1
    assert read[-1] == (1, 4)  # the VACUUM check reads the commits after the oldest snapshot kept


def test_a_widening_delta_recorded_keeps_its_own_refusal_under_column_mapping(tmp_path: Path) -> None:
    """integer -> double by Delta's type widening (delta.typeChanges) is refused as a widening, not as a type change
    of a pinned field id."""
    path = write_compliant_table(tmp_path / "widened")
    metadata = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    schema = json.loads(metadata["schemaString"])

    def commit_type(version: int, type_name: str, changes: list[dict[str, str]] | None = None) -> None:
        schema["fields"][0]["type"] = type_name
        if changes:
            schema["fields"][0]["metadata"]["delta.typeChanges"] = changes
        write_commit(path, [{"metaData": {**metadata, "schemaString": json.dumps(schema)}}], read_version=version,
                     operation="CHANGE COLUMN")

    commit_type(0, "integer")
    convert(str(path))
    commit_type(1, "double", [{"fromType": "integer", "toType": "double"}])
    with pytest.raises(UnsupportedTypeError, match="widened from integer to double"):
        convert(str(path))


def test_a_column_given_an_id_a_list_element_had_is_no_type_change(tmp_path: Path) -> None:
    """Without Delta's nested ids a list element gets an id of ours; a column Delta adds later may get the same
    id (Delta's maxColumnId knows nothing of ours): that is a new column, not a type change of a pinned id."""
    path = write_compliant_table(tmp_path / "element")
    metadata = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    schema = json.loads(metadata["schemaString"])
    schema["fields"].append({"name": "tags", "type": {"type": "array", "elementType": {"type": "struct", "fields": [
        {"name": "e", "type": "long", "nullable": True, "metadata": {
            "delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-4"}}]}, "containsNull": True},
        "nullable": True, "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-3"}})
    configuration = {**metadata["configuration"], "delta.columnMapping.maxColumnId": "4"}
    write_commit(path, [{"metaData": {**metadata, "schemaString": json.dumps(schema),
                                      "configuration": configuration}}], read_version=0, operation="ADD COLUMNS")
    first = convert(str(path))
    element_id = StaticTable.from_metadata(first.metadata_location).schema().find_field("tags.element").field_id
    assert element_id == 5  # ours, above maxColumnId
    schema["fields"].append({"name": "added", "type": "string", "nullable": True, "metadata": {
        "delta.columnMapping.id": 5, "delta.columnMapping.physicalName": "col-5"}})
    configuration = {**configuration, "delta.columnMapping.maxColumnId": "5"}
    write_commit(path, [{"metaData": {**metadata, "schemaString": json.dumps(schema),
                                      "configuration": configuration}}], read_version=1, operation="ADD COLUMNS")
    result = convert(str(path))
    assert StaticTable.from_metadata(result.metadata_location).schema().find_field("added").field_id == 5


def test_a_file_added_again_counts_from_its_first_add(tmp_path: Path) -> None:
    """A live file added again (stats recomputed, dataChange=false) was read by the snapshots since its first add:
    once a later commit removes it and VACUUM deletes it, all of those expire, not only the ones since the re-add."""
    path = tmp_path / "readded"
    write_deltalake(str(path), id_rows(0, 4))
    convert(str(path))
    write_deltalake(str(path), id_rows(10, 4), mode="append")
    convert(str(path))
    adds = [a["add"] for a in read_actions(commit_file(path, 1)) if "add" in a]
    lines = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "COMPUTE STATS"}},
             *({"add": {**add, "dataChange": False}} for add in adds)]
    commit_file(path, 2).write_text("".join(json.dumps(a) + "\n" for a in lines))
    convert(str(path))
    deltalake.DeltaTable(str(path)).delete("id >= 10")  # removes the file of version 1
    convert(str(path))
    deltalake.DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    result = convert(str(path))
    kept = assert_every_snapshot_reads_delta(path, result.metadata_location)
    assert 0 in kept and not {1, 2} & set(kept)


def test_a_transient_store_fault_in_the_vacuum_check_expires_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A retryable error reading the commits says nothing of the files: the run fails retryable, the snapshots stay
    (expiring them on it lost history for good)."""
    path = tmp_path / "flaky"
    write_deltalake(str(path), id_rows(0, 2))
    convert(str(path))
    deltalake.DeltaTable(str(path)).delete("id = 0")
    before = convert(str(path))

    def stalled(self: DeltaTable, start: int, end: int | None = None, **kwargs: Any) -> Any:
        raise StorageTimeoutError(f"{path}: reading commit {start}: the store did not answer")

    monkeypatch.setattr(DeltaTable, "commits", stalled)
    with pytest.raises(StorageTimeoutError):  # an up-to-date run: only the VACUUM check reads commits
        convert(str(path))
    monkeypatch.undo()
    after = convert(str(path))
    assert set(retained_versions(after.metadata_location)) >= set(retained_versions(before.metadata_location))
