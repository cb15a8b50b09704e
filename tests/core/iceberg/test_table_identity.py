"""Identity (issue 26 §1): a conversion builds only on Iceberg metadata this converter wrote for this Delta table's
log. A Delta table deleted and written again at the same path (``_iceberg/`` left behind) starts a new Iceberg
history; forged or foreign metadata files and stray file names are ignored, never adopted nor pointed to.

Rows are read back with pyiceberg (through the SQLite catalog and from the metadata files) and compared with
deltalake's kernel reader (``support.oracle``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.cli import main_exit_code
from support.delta_log import append_commit, commit_file, read_actions
from support.oracle import delta_rows, open_sql_catalog, rows_of, sql_catalog_config

from airflow_deltaberg.core.errors import IcebergMetadataError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.publish import VERSION_HINT, read_metadata
from airflow_deltaberg.core.iceberg.table_identity import FINGERPRINT
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TABLE_ID, DELTA_VERSION, table_uuid_for
from airflow_deltaberg.core.storage import open_storage

IDENTIFIER = "db.events"
METADATA = Path("_iceberg/metadata")


def _batch(start: int, n: int, extra: bool = False) -> pa.Table:
    ids = list(range(start, start + n))
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "label": [f"p{i % 2}" for i in ids]}
    if extra:
        columns["note"] = [f"n{i}" for i in ids]
    return pa.table(columns)


def write_versions(path: Path, sizes: list[int], *, start: int = 0, extra: bool = False) -> None:
    """One commit per size: the first creates the table, the others append."""
    for i, n in enumerate(sizes):
        write_deltalake(str(path), _batch(start + 100 * i, n, extra), mode="append" if i else "error",
                        schema_mode="merge" if i and extra else None)


def recreate(path: Path, sizes: list[int], *, extra: bool = False) -> None:
    """Delete the Delta table (its log and data files; ``_iceberg`` stays) and write another one at the path."""
    shutil.rmtree(path / "_delta_log")
    for data in path.glob("*.parquet"):
        data.unlink()
    write_versions(path, sizes, start=1000, extra=extra)


def run(path: Path, tmp_path: Path, **kwargs: Any) -> ConversionResult:
    return convert(str(path), catalog_config=sql_catalog_config(tmp_path), identifier=IDENTIFIER, **kwargs)


def catalog_table(tmp_path: Path) -> Any:
    return open_sql_catalog(tmp_path).load_table(IDENTIFIER)


def metadata_of(location: str) -> dict[str, Any]:
    return json.loads(Path(location).read_text())


def metadata_folder(path: Path) -> set[str]:
    return {p.name for p in (path / METADATA).iterdir()}


def files_named(table: StaticTable) -> set[str]:
    """Names of every Iceberg metadata-folder file the table's snapshots use (manifest lists and manifests)."""
    names = set()
    for snapshot in table.metadata.snapshots:
        names.add(Path(snapshot.manifest_list).name)
        names.update(Path(m.manifest_path).name for m in snapshot.manifests(table.io))
    return names


def assert_new_history(path: Path, tmp_path: Path, result: ConversionResult, old_id: str,
                       old_files: set[str]) -> None:
    """A full conversion of the new table only, said and pointed to, leaving the old history's files alone."""
    new_id = deltalake.DeltaTable(str(path)).metadata().id
    assert result.mode == "full"
    assert result.fall_back is not None
    assert any(old_id in w and new_id in w for w in result.warnings), result.warnings
    assert result.records == len(delta_rows(path))
    metadata = metadata_of(result.metadata_location)
    assert metadata["table-uuid"] == table_uuid_for(new_id)
    assert metadata["properties"][DELTA_TABLE_ID] == new_id
    assert len(metadata["snapshots"]) == 1 and metadata.get("metadata-log", []) == []
    table = StaticTable.from_metadata(result.metadata_location)
    assert rows_of(table.scan().to_arrow()) == delta_rows(path)
    # The catalog points to it; the old history's files are neither deleted (a reader may hold the old pointer) nor
    # referenced.
    assert catalog_table(tmp_path).metadata_location == result.metadata_location
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    assert old_files <= metadata_folder(path)
    assert not files_named(table) & old_files
    # The version number continues above the old history's (write-if-absent names).
    assert Path(result.metadata_location).name == f"v{max_version(old_files) + 1}.metadata.json"


def max_version(names: set[str]) -> int:
    return max(int(n[1:].split(".")[0]) for n in names if n.startswith("v") and n.endswith(".metadata.json"))


# ----------------------------------------------------------------------------------- a table written again


@pytest.mark.parametrize("sizes", [[10, 10, 10], [5, 5, 5, 5, 5]], ids=["same-versions", "more-versions"])
def test_recreated_table_starts_a_new_history(tmp_path: Path, sizes: list[int]) -> None:
    """The issue's reproduction: 3 versions converted, the table deleted and written again with as many versions
    (today: "up-to-date", the old 30 rows) or more (today: "incremental" onto the old files)."""
    path = tmp_path / "events"
    write_versions(path, [10, 10, 10])
    old_id = deltalake.DeltaTable(str(path)).metadata().id
    for version in range(3):
        run(path, tmp_path, version=version)
    old_files = metadata_folder(path)
    recreate(path, [3] * (len(sizes) - 1) + [6])
    result = run(path, tmp_path)
    assert_new_history(path, tmp_path, result, old_id, old_files)
    assert "new Iceberg history" in (result.fall_back or "")
    # The next commit goes on incrementally from the new history, with no warning left.
    write_deltalake(str(path), _batch(5000, 4), mode="append")
    again = run(path, tmp_path)
    assert (again.mode, again.warnings, again.fall_back) == ("incremental", (), None)
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)


def test_recreated_table_with_an_added_column_gets_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    old_id = deltalake.DeltaTable(str(path)).metadata().id
    run(path, tmp_path)
    old_files = metadata_folder(path)
    recreate(path, [3, 3], extra=True)
    result = run(path, tmp_path)
    assert_new_history(path, tmp_path, result, old_id, old_files)
    schema = catalog_table(tmp_path).schema()
    assert [f.name for f in schema.fields] == ["id", "label", "note"]


def test_table_id_changed_by_a_commit_starts_a_new_history(tmp_path: Path) -> None:
    """A later commit of the same log giving the table another metaData.id (a replaced table): the incremental run
    falls back to a full conversion, which is a new history (its uuid derives from the new id)."""
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    old_id = deltalake.DeltaTable(str(path)).metadata().id
    run(path, tmp_path)
    old_files = metadata_folder(path)
    metadata = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    append_commit(path, [{"metaData": {**metadata, "id": "a1b2c3d4-0000-4000-8000-000000000026"}}])
    result = run(path, tmp_path)
    assert_new_history(path, tmp_path, result, old_id, old_files)
    assert "replaces the table" in (result.fall_back or "")


def test_commit_gone_by_log_cleanup_converts_in_full_on_the_same_history(tmp_path: Path) -> None:
    """The converted version's commit removed by log cleanup: the history cannot be checked against the log, so the
    run is full (said in fall_back), and, the Delta table being the same, builds on its snapshots (which then
    expire: their Delta versions left the log, tests/core/iceberg/test_history.py)."""
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    converted = run(path, tmp_path)
    write_deltalake(str(path), _batch(500, 2), mode="append")
    deltalake.DeltaTable(str(path)).create_checkpoint()
    for version in (0, 1):
        commit_file(path, version).unlink()
    result = run(path, tmp_path)
    assert result.mode == "full" and result.warnings == ()
    assert result.fall_back is not None and "version 1" in result.fall_back and "gone" in result.fall_back
    snapshots = metadata_of(result.metadata_location)["snapshots"]
    assert result.snapshots_expired == 1 and len(snapshots) == 1
    assert snapshots[0]["parent-snapshot-id"] == converted.snapshot_id
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    assert run(path, tmp_path).mode == "up-to-date"


def test_checkpoint_only_version_is_up_to_date_on_the_next_run(tmp_path: Path) -> None:
    """A converted version with a checkpoint and no commit file (its commits removed) is fingerprinted by its
    checkpoint: the next run is up to date, not a full conversion again at every run."""
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    deltalake.DeltaTable(str(path)).create_checkpoint()
    expected = delta_rows(path)  # deltalake refuses a latest version without its commit file
    for version in (0, 1):
        commit_file(path, version).unlink()
    first = run(path, tmp_path)
    assert first.mode == "full" and rows_of(catalog_table(tmp_path).scan().to_arrow()) == expected
    again = run(path, tmp_path)
    assert (again.mode, again.fall_back, again.metadata_location) == ("up-to-date", None, first.metadata_location)


def test_metadata_without_a_fingerprint_converts_in_full_once(tmp_path: Path) -> None:
    """Metadata of a release before the fingerprint: its history cannot be checked against the log, so the next run
    is one full conversion on top of it (the same Delta table: its snapshots stay), which records one."""
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    first = run(path, tmp_path)
    document = metadata_of(first.metadata_location)
    del document["properties"][FINGERPRINT]
    Path(first.metadata_location).write_text(json.dumps(document))
    result = run(path, tmp_path)
    assert result.mode == "full" and "no fingerprint" in (result.fall_back or "") and result.warnings == ()
    assert len(metadata_of(result.metadata_location)["snapshots"]) == 2
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    assert run(path, tmp_path).mode == "up-to-date"


# ----------------------------------------------------------------------------- metadata not ours, stray names


def _relabelled(source: dict[str, Any], version: int) -> dict[str, Any]:
    """``source`` claiming Delta ``version`` in its properties and its current snapshot's summary."""
    forged = json.loads(json.dumps(source))
    forged["properties"][DELTA_VERSION] = str(version)
    for snapshot in forged["snapshots"]:
        if snapshot["snapshot-id"] == forged["current-snapshot-id"]:
            snapshot["summary"][DELTA_VERSION] = str(version)
    return forged


def _beyond_the_log(path: Path, tmp_path: Path) -> dict[str, Any]:
    return _relabelled(metadata_of(str(path / METADATA / "v3.metadata.json")), 99)


def _stale_relabelled(path: Path, tmp_path: Path) -> dict[str, Any]:
    return _relabelled(metadata_of(str(path / METADATA / "v1.metadata.json")), 2)  # version 0's rows as version 2


def _stale_refingerprinted(path: Path, tmp_path: Path) -> dict[str, Any]:
    forged = _stale_relabelled(path, tmp_path)
    forged["properties"][FINGERPRINT] = "2:sha256:" + "0" * 64
    return forged


def _foreign(path: Path, tmp_path: Path) -> dict[str, Any]:
    """Another table's converted metadata, copied in."""
    other = tmp_path / "other"
    write_versions(other, [2, 2, 2])
    return metadata_of(convert(str(other)).metadata_location)


@pytest.mark.parametrize("forge", [_beyond_the_log, _stale_relabelled, _stale_refingerprinted, _foreign])
def test_forged_metadata_is_not_adopted_nor_pointed_to(tmp_path: Path, forge: Any) -> None:
    path = tmp_path / "events"
    write_versions(path, [5, 5, 5])
    for version in range(3):
        real = run(path, tmp_path, version=version)
    forged = path / METADATA / "v4.metadata.json"
    forged.write_text(json.dumps(forge(path, tmp_path)))
    result = run(path, tmp_path)
    assert (result.mode, result.metadata_location) == ("up-to-date", real.metadata_location)
    assert any(str(forged) in w and "ignored" in w for w in result.warnings), result.warnings
    assert catalog_table(tmp_path).metadata_location == real.metadata_location
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    # The next version is published above the forged file, which stays as it was.
    write_deltalake(str(path), _batch(900, 3), mode="append")
    after = run(path, tmp_path)
    assert after.mode == "incremental" and Path(after.metadata_location).name == "v5.metadata.json"
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    assert forged.exists()
    assert run(path, tmp_path).warnings == ()  # below the hint now: not looked at again


def test_expiry_of_an_up_to_date_run_publishes_above_an_ignored_file(tmp_path: Path) -> None:
    """An up-to-date run whose expiry publishes new metadata numbers it above the ignored file (v4 here), as a
    conversion does: publishing at the adopted version + 1 would collide with it on every run."""
    path = tmp_path / "events"
    write_versions(path, [5, 5, 5])
    for version in range(3):
        run(path, tmp_path, version=version)
    forged = path / METADATA / "v4.metadata.json"
    forged.write_text(json.dumps(_stale_relabelled(path, tmp_path)))
    result = run(path, tmp_path, retain_snapshots=1)
    assert (result.mode, result.snapshots_expired) == ("up-to-date", 2)
    assert Path(result.metadata_location).name == "v5.metadata.json"
    assert catalog_table(tmp_path).metadata_location == result.metadata_location
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    assert forged.exists()


@pytest.mark.parametrize("name", ["v03.metadata.json", "v\u0663.metadata.json"])
def test_stray_metadata_names_are_ignored(tmp_path: Path, name: str) -> None:
    """Without a version hint the metadata folder is listed: names this converter never writes are not versions
    (``v03`` and Arabic-Indic ``v٣`` both read as 3 by int(), naming a file that does not exist)."""
    path = tmp_path / "events"
    write_versions(path, [3, 3])
    run(path, tmp_path, version=0)
    run(path, tmp_path)
    (path / METADATA / name).write_text("{}")
    (path / VERSION_HINT).unlink()
    write_deltalake(str(path), _batch(700, 2), mode="append")
    result = run(path, tmp_path)
    assert result.mode == "incremental" and Path(result.metadata_location).name == "v3.metadata.json"
    assert rows_of(catalog_table(tmp_path).scan().to_arrow()) == delta_rows(path)
    (path / VERSION_HINT).unlink()
    assert run(path, tmp_path).mode == "up-to-date"


def test_unreadable_newest_metadata_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "events"
    write_versions(path, [3, 3])
    real = run(path, tmp_path)
    (path / METADATA / "v2.metadata.json").write_text('{"format-version": 2, "garbage": true}')
    result = run(path, tmp_path)
    assert (result.mode, result.metadata_location) == ("up-to-date", real.metadata_location)
    assert any("v2.metadata.json is ignored" in w for w in result.warnings), result.warnings


# ----------------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("output", ["text", "json"])
def test_cli_convert_shows_the_new_history(tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str) -> None:
    path = tmp_path / "events"
    write_versions(path, [4, 4])
    old_id = deltalake.DeltaTable(str(path)).metadata().id
    run(path, tmp_path)
    recreate(path, [2, 2])
    new_id = deltalake.DeltaTable(str(path)).metadata().id
    capsys.readouterr()
    assert main_exit_code(["convert", str(path), "--format", output]) == 0
    out = capsys.readouterr().out
    if output == "json":
        summary = json.loads(out)
        assert summary["mode"] == "full" and "new Iceberg history" in summary["fall_back"]
        assert any(old_id in w and new_id in w for w in summary["warnings"])
    else:
        assert "full conversion because the Iceberg metadata in the folder is not of this Delta table" in out
        assert any(line.startswith("warning: ") and old_id in line and new_id in line for line in out.splitlines())


def test_metadata_of_format_version_1_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events"
    write_versions(path, [3, 3])
    real = run(path, tmp_path)
    document = json.loads((path / METADATA / "v1.metadata.json").read_text())
    document.update({"format-version": 1, "schema": document["schemas"][0]})  # v1 needs its single schema
    (path / METADATA / "v2.metadata.json").write_text(json.dumps(document))
    with pytest.raises(IcebergMetadataError, match="format version 2 or 3") as raised:
        read_metadata(open_storage(str(path)), 2)
    assert raised.value.file is not None and raised.value.file.endswith("v2.metadata.json")
    result = run(path, tmp_path)  # and a conversion ignores it, saying why
    assert (result.mode, result.metadata_location) == ("up-to-date", real.metadata_location)
    assert any("v2.metadata.json is ignored" in w and "IcebergMetadataError" in w for w in result.warnings)
