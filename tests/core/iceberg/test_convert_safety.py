"""Safety of convert(): refusals write nothing, crashes at each write step leave the previous Iceberg state
readable and a re-run converges, and of two converters racing for the same table exactly one wins.

Readers are pyiceberg through the three ways a converted table is found: the SQLite SQL catalog pointer,
``_iceberg/metadata/version-hint.text`` (path-based readers), and a metadata file itself (``StaticTable``).
Rows are compared with deltalake's (tables here hold only int64 and string columns: no normalization needed
beyond sorting, as Delta and Iceberg promise no row order).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import append_commit
from support.oracle import Rows, delta_rows, open_sql_catalog, rows_of, sql_catalog_config

import airflow_deltaberg.core.iceberg.convert as convert_module
import airflow_deltaberg.core.iceberg.convert_commit as commit_module
import airflow_deltaberg.core.iceberg.table_identity as identity_module
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import (
    ConcurrentConversionError,
    CorruptLogError,
    UnsupportedFeatureError,
    UnsupportedTypeError,
)
from airflow_deltaberg.core.iceberg.conversion_state import read_state
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.publish import VERSION_HINT
from airflow_deltaberg.core.storage import LocalStorage, open_storage

CATALOG_NAME = "deltaberg"
IDENTIFIER = "safety.converted"



class InjectedCrash(Exception):
    """Stands for the process dying at a chosen step of the conversion."""


# --------------------------------------------------------------------------------------------------- helpers


def run_convert(path: Path, tmp_path: Path, **kwargs: Any) -> ConversionResult:
    return convert(str(path), catalog_config=sql_catalog_config(tmp_path), identifier=IDENTIFIER, **kwargs)


def catalog_rows(tmp_path: Path) -> Rows | None:
    """Rows of the table the catalog points to; None when it is not registered."""
    catalog = open_sql_catalog(tmp_path, CATALOG_NAME)
    if not catalog.table_exists(IDENTIFIER):
        return None
    return rows_of(catalog.load_table(IDENTIFIER).scan().to_arrow())


def hint_rows(path: Path) -> Rows | None:
    """Rows of the metadata version the hint names (what path-based readers see); None without a hint."""
    hint = path / VERSION_HINT
    if not hint.exists():
        return None
    version = int(hint.read_text().strip())
    metadata = path / f"_iceberg/metadata/v{version}.metadata.json"
    return rows_of(StaticTable.from_metadata(str(metadata)).scan().to_arrow())


def metadata_files(path: Path) -> dict[str, bytes]:
    folder = path / "_iceberg" / "metadata"
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def published_versions(path: Path) -> list[int]:
    return sorted(int(p.name[1:].split(".")[0]) for p in (path / "_iceberg" / "metadata").glob("v*.metadata.json"))


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"p{i % 3}" for i in ids]})


def make_table(path: Path) -> None:
    write_deltalake(str(path), _batch(0, 6), partition_by=["label"])
    write_deltalake(str(path), _batch(6, 6), mode="append", partition_by=["label"])


def add_commits(path: Path) -> None:
    """New Delta commits after a conversion: an append, a delete that rewrites files, another append."""
    write_deltalake(str(path), _batch(12, 4), mode="append", partition_by=["label"])
    deltalake.DeltaTable(str(path)).delete("id % 4 = 1")
    write_deltalake(str(path), _batch(16, 3), mode="append", partition_by=["label"])


def current_metadata_action(path: Path) -> dict[str, Any]:
    """The latest metaData action of a deltalake-written table (it writes one only at creation here)."""
    for line in (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines():
        action = json.loads(line)
        if "metaData" in action:
            return action["metaData"]
    raise AssertionError("no metaData in version 0")


# ------------------------------------------------------------------------------------- refusals write nothing


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_deletion_vectors_after_a_conversion_become_position_deletes(
    full: bool, copy_fixture: Callable[[str], Path], tmp_path: Path
) -> None:
    """table-with-dv-small: version 0 converts; version 1 adds a deletion vector to the same file, which becomes a
    position delete file (incrementally: the data file entry stays, only the delete is added)."""
    path = copy_fixture("table-with-dv-small")
    first = run_convert(path, tmp_path, version=0)
    assert catalog_rows(tmp_path) is not None and len(catalog_rows(tmp_path) or []) == 10
    second = run_convert(path, tmp_path, full=full)
    expected = delta_rows(path)
    assert len(expected) < 10, "version 1 deletes rows"
    assert catalog_rows(tmp_path) == expected
    assert hint_rows(path) == expected
    table = open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER)
    summary = table.current_snapshot().summary
    assert summary["total-delete-files"] == "1" and summary["total-data-files"] == "1"
    assert int(summary["total-position-deletes"]) == 10 - len(expected)
    if not full:
        assert summary["added-data-files"] == "0" and summary.operation.value == "delete"
    assert rows_of(table.scan(snapshot_id=first.snapshot_id).to_arrow()) == delta_rows(path, 0)
    assert second.delta_version == 1


def _void_column(path: Path) -> None:
    meta = current_metadata_action(path)
    schema = json.loads(meta["schemaString"])
    schema["fields"].append({"name": "nothing", "type": "void", "nullable": True, "metadata": {}})
    append_commit(path, [{"metaData": {**meta, "schemaString": json.dumps(schema)}}])


def _narrowing_type_change(path: Path) -> None:
    """id long -> double with delta.typeChanges: files written before hold int64, which Iceberg cannot promote."""
    meta = current_metadata_action(path)
    schema = json.loads(meta["schemaString"])
    version = deltalake.DeltaTable(str(path)).version() + 1
    for field in schema["fields"]:
        if field["name"] == "id":
            field["type"] = "double"
            field["metadata"] = {"delta.typeChanges": [{"fromType": "long", "toType": "double",
                                                       "tableVersion": version}]}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                "writerFeatures": ["typeWidening"]}
    append_commit(path, [{"protocol": protocol}, {"metaData": {**meta, "schemaString": json.dumps(schema),
                                                            "configuration": {"delta.enableTypeWidening": "true"}}}])


def _ambiguous_names(path: Path) -> None:
    """A column named "meta.x" next to struct meta with field x: Iceberg names fields by dotted full name."""
    meta = current_metadata_action(path)
    schema = json.loads(meta["schemaString"])
    inner = {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]}
    schema["fields"] += [{"name": "meta", "type": inner, "nullable": True, "metadata": {}},
                         {"name": "meta.x", "type": "long", "nullable": True, "metadata": {}}]
    append_commit(path, [{"metaData": {**meta, "schemaString": json.dumps(schema)}}])


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
@pytest.mark.parametrize("change", [_void_column, _narrowing_type_change, _ambiguous_names],
                         ids=["void", "type-change", "ambiguous-names"])
def test_unsupported_type_after_a_conversion_writes_nothing(
    change: Callable[[Path], None], full: bool, tmp_path: Path
) -> None:
    path = tmp_path / "table"
    make_table(path)
    first = run_convert(path, tmp_path)
    before_rows = delta_rows(path)
    before = metadata_files(path)
    change(path)
    with pytest.raises(UnsupportedTypeError):
        run_convert(path, tmp_path, full=full)
    assert metadata_files(path) == before, "a refused conversion wrote into metadata/"
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == first.metadata_location
    assert catalog_rows(tmp_path) == before_rows
    assert hint_rows(path) == before_rows


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_stats_that_are_not_json_after_a_conversion_write_nothing(full: bool, tmp_path: Path) -> None:
    path = tmp_path / "table"
    make_table(path)
    first = run_convert(path, tmp_path)
    before_rows = delta_rows(path)
    before = metadata_files(path)
    write_deltalake(str(path), _batch(12, 2), mode="append", partition_by=["label"])
    new_commit = path / "_delta_log" / f"{first.delta_version + 1:020d}.json"
    actions = [json.loads(line) for line in new_commit.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            action["add"]["stats"] = action["add"]["stats"][:-5]  # cut short: not JSON
    new_commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    with pytest.raises(CorruptLogError) as info:
        run_convert(path, tmp_path, full=full)
    message = str(info.value)
    assert f"version {first.delta_version + 1}" in message and new_commit.name in message, message
    assert "not JSON" in message and str(path) in message, message
    assert metadata_files(path) == before, "a refused conversion wrote into metadata/"
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == first.metadata_location
    assert catalog_rows(tmp_path) == before_rows
    assert hint_rows(path) == before_rows


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
@pytest.mark.parametrize("protocol", [
    {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["catalogManaged"],
     "writerFeatures": ["catalogManaged"]},
    {"minReaderVersion": 4, "minWriterVersion": 7},
], ids=["unknown-reader-feature", "reader-version-4"])
def test_a_commit_raising_the_protocol_beyond_this_reader_writes_nothing(full: bool, protocol: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """A commit after a conversion that needs a reader this engine is not: refused by the incremental path too (it
    read on as if nothing had changed), and nothing is written."""
    path = tmp_path / "table"
    make_table(path)
    first = run_convert(path, tmp_path)
    before, before_rows = metadata_files(path), delta_rows(path)
    version = append_commit(path, [{"protocol": protocol}])
    with pytest.raises(UnsupportedFeatureError) as info:
        run_convert(path, tmp_path, full=full)
    assert f"version {version}" in str(info.value) and str(path) in str(info.value)
    assert metadata_files(path) == before, "a refused conversion wrote into metadata/"
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == first.metadata_location
    assert catalog_rows(tmp_path) == before_rows


def _mapped_metadata(column_id: int, max_column_id: int, name: str = "id",
                     extra: tuple[tuple[str, int, str], ...] = ()) -> dict[str, Any]:
    """A name-mode metaData: column ``name`` (physical name col-a1) with ``column_id``, and ``extra`` columns
    (name, id, physical name)."""
    fields = [{"name": n, "type": "long", "nullable": True,
               "metadata": {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": p}}
              for n, i, p in ((name, column_id, "col-a1"), *extra)]
    return {"id": "00000000-0000-0000-0000-000000000301", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps({"type": "struct", "fields": fields}), "partitionColumns": [],
            "configuration": {"delta.columnMapping.mode": "name",
                              "delta.columnMapping.maxColumnId": str(max_column_id)},
            "createdTime": 1_700_000_000_000}


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_a_column_mapping_id_above_max_column_id_writes_nothing(full: bool, tmp_path: Path) -> None:
    """A metaData whose schema uses a column mapping id above delta.columnMapping.maxColumnId (found by the fuzz
    suite: an id changed to 101 with the maximum at 3; here a column added with it): no writer assigned that id, so
    it need not be the field id of the column in the data files, which Iceberg readers resolve columns by. Refused,
    nothing written."""
    path = tmp_path / "table"
    _mapped_table(path)
    first = run_convert(path, tmp_path)
    assert first.files_added == 1
    before = metadata_files(path)
    version = append_commit(path, [{"metaData": _mapped_metadata(1, 3, extra=(("more", 101, "col-b2"),))}])
    with pytest.raises(CorruptLogError) as info:
        run_convert(path, tmp_path, full=full)
    message = str(info.value)
    assert f"version {version}" in message and "id 101" in message and "maxColumnId 3" in message, message
    assert metadata_files(path) == before, "a refused conversion wrote into metadata/"
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == first.metadata_location


def _mapped_table(path: Path) -> None:
    (path / "_delta_log").mkdir(parents=True)
    stats = json.dumps({"numRecords": 2, "minValues": {"col-a1": 1}, "maxValues": {"col-a1": 2},
                        "nullCount": {"col-a1": 0}})
    append_commit(path, [{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
                         {"metaData": _mapped_metadata(1, 1)},
                         {"add": {"path": "f-0.parquet", "partitionValues": {}, "size": 100,
                                  "modificationTime": 1_700_000_000_000, "dataChange": True, "stats": stats}}],
                  version=0)


@pytest.mark.parametrize("converted_first", [False, True], ids=["full", "incremental"])
def test_a_metadata_changing_a_column_mapping_id_is_refused(converted_first: bool, tmp_path: Path) -> None:
    """A column keeps its column mapping id for good (found by the fuzz suite, seed 3 case 2874: an id moved from 3
    to 0 made Iceberg readers, by field id, read nulls where deltalake, by physical name, read values). Refused by
    the snapshot, a full conversion and an incremental one, naming the version; nothing written."""
    path = tmp_path / "table"
    _mapped_table(path)
    first = run_convert(path, tmp_path) if converted_first else None
    before = metadata_files(path)
    version = append_commit(path, [{"metaData": _mapped_metadata(0, 1)}])
    with pytest.raises(CorruptLogError, match="changes the column mapping id of column 'id' from 1 to 0") as info:
        run_convert(path, tmp_path)
    assert info.value.version == version and info.value.file is not None
    assert info.value.file.endswith(f"{version:020d}.json")
    assert metadata_files(path) == before, "a refused conversion wrote into metadata/"
    if first is not None:
        catalog = open_sql_catalog(tmp_path, CATALOG_NAME)
        assert catalog.load_table(IDENTIFIER).metadata_location == first.metadata_location
    with pytest.raises(CorruptLogError, match="from 1 to 0"):
        DeltaTable(str(path)).snapshot()


def test_renaming_and_adding_mapped_columns_still_converts(tmp_path: Path) -> None:
    """What writers do keep converting: a rename keeps the physical name and the id, an added column gets a new
    physical name and id."""
    path = tmp_path / "table"
    _mapped_table(path)
    first = run_convert(path, tmp_path)
    append_commit(path, [{"metaData": _mapped_metadata(1, 2, name="key", extra=(("more", 2, "col-b2"),))}])
    result = run_convert(path, tmp_path)
    assert result.mode == "incremental" and result.delta_version == first.delta_version + 1
    assert DeltaTable(str(path)).snapshot().metadata.schema.field("key").column_mapping_id == 1


def test_an_unreadable_version_in_between_converts_the_latest_in_full(tmp_path: Path) -> None:
    """A metaData without schemaString that the next commit replaces (Delta Live Tables writes such commits): that
    version cannot be read on its own, so the run converts the latest version in full instead of one snapshot per
    commit."""
    path = tmp_path / "table"
    make_table(path)
    run_convert(path, tmp_path)
    write_deltalake(str(path), _batch(12, 3), mode="append", partition_by=["label"])
    complete = current_metadata_action(path)
    incomplete = {k: v for k, v in complete.items() if k != "schemaString"}
    append_commit(path, [{"metaData": incomplete}])
    latest = append_commit(path, [{"metaData": complete}], version=4)  # deltalake cannot read this log any more
    result = run_convert(path, tmp_path)
    assert (result.mode, result.delta_version) == ("full", latest)
    assert catalog_rows(tmp_path) == rows_of(pa.concat_tables([_batch(0, 12), _batch(12, 3)]))


# ------------------------------------------------------------------------------------------------- crashes

CRASH_POINTS = ["after-manifests", "after-state", "after-manifest-list", "after-metadata-json", "after-hint"]


def _crash(*_args: Any, **_kwargs: Any) -> None:
    raise InjectedCrash


def install_crash(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    """Make the conversion die at ``point``, the steps in write order (see convert.py's docstring)."""
    if point == "after-manifests":  # manifests and their entry copies written, the conversion state not
        monkeypatch.setattr(commit_module, "write_state", _crash)
    elif point == "after-state":  # the conversion state written, the manifest list not
        monkeypatch.setattr(commit_module, "write_manifest_list_rows", _crash)
    elif point == "after-manifest-list":
        original = commit_module.write_manifest_list_rows

        def write_then_crash(*args: Any, **kwargs: Any) -> Any:
            original(*args, **kwargs)
            raise InjectedCrash

        monkeypatch.setattr(commit_module, "write_manifest_list_rows", write_then_crash)
    elif point == "after-metadata-json":  # v<N>.metadata.json written, the hint not moved
        original_replace = LocalStorage.replace

        def replace(self: LocalStorage, key: str, data: bytes) -> None:
            if key == VERSION_HINT:
                raise InjectedCrash
            original_replace(self, key, data)

        monkeypatch.setattr(LocalStorage, "replace", replace)
    elif point == "after-hint":  # hint moved, the catalog pointer not
        monkeypatch.setattr(convert_module, "point_catalog", _crash)
    else:
        raise ValueError(point)


@pytest.mark.parametrize("mode", ["first", "incremental", "full"])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_keeps_previous_state_and_rerun_converges(
    point: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "table"
    make_table(path)
    previous_rows: Rows | None = None
    if mode != "first":
        run_convert(path, tmp_path)
        previous_rows = delta_rows(path)
        add_commits(path)
    full = mode == "full"
    # The reference: the same table and Iceberg state, converted without a crash.
    twin = tmp_path / "twin"
    shutil.copytree(path, twin)
    reference = convert(str(twin), full=full)
    versions_before = published_versions(path) if mode != "first" else []
    files_before = metadata_files(path)

    with monkeypatch.context() as patch:
        install_crash(patch, point)
        with pytest.raises(InjectedCrash):
            run_convert(path, tmp_path, full=full)

    # The previous state is what the catalog shows, and what the hint shows until the hint moved.
    assert catalog_rows(tmp_path) == previous_rows
    if point == "after-hint":
        assert hint_rows(path) == delta_rows(path)
    else:
        assert hint_rows(path) == previous_rows
    if point in ("after-metadata-json", "after-hint"):
        assert len(published_versions(path)) > len(versions_before)
    else:
        assert published_versions(path) == versions_before, "nothing may be published before the metadata file"
        # A failure before the metadata file takes back what the attempt wrote (a killed process cannot).
        assert metadata_files(path) == files_before, "a failed attempt left files under _iceberg/metadata"

    rerun = run_convert(path, tmp_path)
    latest = delta_rows(path)
    assert rerun.snapshot_id == reference.snapshot_id, "the re-run must converge on the uncrashed result"
    assert rerun.delta_version == reference.delta_version
    assert rows_of(StaticTable.from_metadata(rerun.metadata_location).scan().to_arrow()) == latest
    assert catalog_rows(tmp_path) == latest
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == rerun.metadata_location
    assert (path / VERSION_HINT).read_text().strip() == str(max(published_versions(path))), (
        "the version hint must name the newest metadata file after a re-run"
    )
    assert hint_rows(path) == latest
    again = run_convert(path, tmp_path)
    assert again.mode == "up-to-date" and again.snapshot_id == rerun.snapshot_id


# --------------------------------------------------------------------------------------------------- races


def install_publish_barrier(monkeypatch: pytest.MonkeyPatch) -> threading.Barrier:
    """Both converters stop right before their first publish, so both built on the same previous state
    (an incremental run publishes once per commit; only the first publish of each thread waits)."""
    barrier = threading.Barrier(2, timeout=30)
    original = commit_module.publish_metadata
    waited = threading.local()

    def publish(*args: Any, **kwargs: Any) -> Any:
        if not getattr(waited, "done", False):
            waited.done = True
            barrier.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(commit_module, "publish_metadata", publish)
    return barrier


def race(path: Path, tmp_path: Path) -> tuple[list[ConversionResult], list[BaseException]]:
    results: list[ConversionResult] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(run_convert(path, tmp_path))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on by the test
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return results, errors


@pytest.mark.parametrize("mode", ["first", "incremental"])
def test_two_converters_race_one_wins(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "table"
    make_table(path)
    previous_rows = None
    if mode == "incremental":
        run_convert(path, tmp_path)
        previous_rows = delta_rows(path)
        add_commits(path)
    barrier = install_publish_barrier(monkeypatch)
    try:
        results, errors = race(path, tmp_path)
    finally:
        barrier.abort()
    assert len(results) == 1, f"exactly one converter must win, got {results} and {errors!r}"
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentConversionError), errors
    winner = results[0]
    latest = delta_rows(path)
    assert latest != previous_rows
    assert rows_of(StaticTable.from_metadata(winner.metadata_location).scan().to_arrow()) == latest
    assert catalog_rows(tmp_path) == latest
    assert open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER).metadata_location == winner.metadata_location
    assert hint_rows(path) == latest
    monkeypatch.undo()
    again = run_convert(path, tmp_path)
    assert again.mode == "up-to-date" and again.snapshot_id == winner.snapshot_id


def test_race_loser_keeps_the_winners_conversion_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loser of a race computed the same snapshot id as the winner: its conversion state must not replace
    the winner's (the state next to a published snapshot has to describe that snapshot's manifests)."""
    path = tmp_path / "table"
    make_table(path)
    run_convert(path, tmp_path)
    add_commits(path)
    stale = identity_module.metadata_versions(open_storage(str(path)))
    winner = run_convert(path, tmp_path)
    # The loser listed the metadata before the winner published: it builds on the same previous state.
    monkeypatch.setattr(identity_module, "metadata_versions", lambda storage: stale)
    with pytest.raises(ConcurrentConversionError):
        run_convert(path, tmp_path)
    monkeypatch.undo()
    storage = open_storage(str(path))
    table = StaticTable.from_metadata(winner.metadata_location)
    for snapshot in table.metadata.snapshots:
        state = read_state(storage, snapshot.manifest_list)
        assert state is not None
        published = {m.manifest_path for m in snapshot.manifests(table.io)}
        assert {m.info.manifest_path for m in state.manifests} == published, (
            f"the conversion state of snapshot {snapshot.snapshot_id} (Delta version {state.delta_version}) "
            "lists manifests its manifest list does not"
        )


# ------------------------------------------------------------------------------------- living next to Delta


def test_delta_vacuum_keeps_the_iceberg_table(tmp_path: Path) -> None:
    """VACUUM deletes every file under the table that the Delta log does not reference, except below folders
    named with a leading underscore or dot: the Iceberg metadata lives in one of those."""
    path = tmp_path / "vacuumed"
    write_deltalake(str(path), _batch(0, 6), partition_by=["label"])
    write_deltalake(str(path), _batch(6, 6), mode="overwrite", partition_by=["label"])  # old files: tombstones
    run_convert(path, tmp_path)
    before = metadata_files(path)
    removed = deltalake.DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                     dry_run=False)
    assert removed, "the overwrite left files for VACUUM to delete"
    assert metadata_files(path) == before
    assert catalog_rows(tmp_path) == hint_rows(path) == delta_rows(path)
    # deltalake records VACUUM START/END commits (no file changes): they convert on top, nothing is lost.
    after = run_convert(path, tmp_path)
    assert after.delta_version == deltalake.DeltaTable(str(path)).version()
    assert catalog_rows(tmp_path) == delta_rows(path)
