"""Catalogs beyond the SQL pointer move: conversions registered, then committed as metadata updates through
pyiceberg's Catalog.commit_table.

Two real catalogs take the updates path: Iceberg's own REST catalog server (Java, on loopback, support/rest_catalog.py)
through pyiceberg's RestCatalog, and pyiceberg's SqlCatalog told to commit updates (``deltaberg.commit-mode``),
which applies them client-side exactly as pyiceberg's Glue and Hive catalogs do. Rows read through the catalog are
compared with deltalake's (int64 and string columns only: sorting is the only normalization needed).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable, Table
from support.oracle import Rows, delta_rows, rows_of

from airflow_deltaberg.core.errors import CatalogError, ConcurrentConversionError
from airflow_deltaberg.core.iceberg import convert_commit
from airflow_deltaberg.core.iceberg.catalog import COMMIT_MODE_PROPERTY, commit_mode, open_catalog, point_catalog
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.table_metadata import table_uuid_for

CATALOG_NAME = "deltaberg"
UPDATE_CATALOGS = ["rest", "sql-updates"]


# --------------------------------------------------------------------------------------------------- helpers


@pytest.fixture
def identifier() -> str:
    """A namespace per test: every REST test shares one server."""
    return f"t{uuid.uuid4().hex[:10]}.events"


def catalog_config_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if kind == "rest":
        return {"type": "rest", "uri": request.getfixturevalue("rest_server").uri}
    config = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    if kind == "sql-updates":
        config[COMMIT_MODE_PROPERTY] = "updates"
    return config


@pytest.fixture(params=UPDATE_CATALOGS)
def catalog_config(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return catalog_config_for(request.param, request, tmp_path)


def load(config: dict[str, str], identifier: str) -> Table:
    """The table as a fresh catalog client sees it."""
    return open_catalog(CATALOG_NAME, config).load_table(identifier)


def catalog_rows(config: dict[str, str], identifier: str, snapshot_id: int | None = None) -> Rows:
    return rows_of(load(config, identifier).scan(snapshot_id=snapshot_id).to_arrow())


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"p{i % 3}" for i in ids]})


def make_table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    write_deltalake(str(path), batch(0, 6), partition_by=["label"])
    write_deltalake(str(path), batch(6, 4), mode="append", partition_by=["label"])
    return path


def run(path: Path, config: dict[str, str] | None, identifier: str | None, **kwargs: Any) -> ConversionResult:
    return convert(str(path), catalog_config=config, identifier=identifier, **kwargs)


def our_metadata(result: ConversionResult) -> Any:
    return StaticTable.from_metadata(result.metadata_location).metadata


# --------------------------------------------------------------------------------- register, then commit


def test_register_then_commit_each_conversion(catalog_config: dict[str, str], identifier: str,
                                              tmp_path: Path) -> None:
    path = make_table(tmp_path)
    first = run(path, catalog_config, identifier)
    assert load(catalog_config, identifier).metadata_location == first.metadata_location  # registered on our file
    assert catalog_rows(catalog_config, identifier) == delta_rows(path)

    # An append, a delete rewriting files, and an append adding a column: three Delta commits.
    write_deltalake(str(path), batch(10, 5), mode="append", partition_by=["label"])
    deltalake.DeltaTable(str(path)).delete("id % 4 = 1")
    extra = batch(15, 3).append_column("note", pa.array(["x", None, "z"], pa.string()))
    write_deltalake(str(path), extra, mode="append", partition_by=["label"], schema_mode="merge")
    second = run(path, catalog_config, identifier)
    assert (second.mode, second.snapshots_written) == ("incremental", 3)

    table = load(catalog_config, identifier)
    # The catalog wrote its own metadata file (a commit, not a pointer move), next to ours.
    assert table.metadata_location != second.metadata_location
    assert Path(table.metadata_location.removeprefix("file:")).parent == Path(second.metadata_location
                                                                                .removeprefix("file:")).parent
    assert rows_of(table.scan().to_arrow()) == delta_rows(path)
    ours = our_metadata(second)
    assert table.metadata.current_snapshot_id == ours.current_snapshot_id == second.snapshot_id
    assert sorted(s.snapshot_id for s in table.metadata.snapshots) == sorted(s.snapshot_id for s in ours.snapshots)
    assert [(s.schema_id, s.as_struct()) for s in table.metadata.schemas] == \
        [(s.schema_id, s.as_struct()) for s in ours.schemas]
    assert "note" in table.schema().column_names and len(table.metadata.schemas) == 2
    assert [(s.spec_id, s.fields) for s in table.metadata.partition_specs] == \
        [(s.spec_id, s.fields) for s in ours.partition_specs]
    assert table.properties["delta-version"] == str(second.delta_version) == "4"
    # Every snapshot carries its Delta version, and reads what Delta reads at that version.
    versions = {}
    for snapshot in table.metadata.snapshots:
        assert snapshot.summary is not None
        versions[snapshot.snapshot_id] = int(snapshot.summary["delta-version"])
    assert sorted(versions.values()) == [1, 2, 3, 4]
    for snapshot_id, version in versions.items():
        assert catalog_rows(catalog_config, identifier, snapshot_id) == delta_rows(path, version), version

    # Nothing new: no commit, the catalog stays on the same metadata file.
    third = run(path, catalog_config, identifier)
    assert third.mode == "up-to-date"
    assert load(catalog_config, identifier).metadata_location == table.metadata_location


def test_full_reconversion_commits_an_overwrite(catalog_config: dict[str, str], identifier: str,
                                                tmp_path: Path) -> None:
    path = make_table(tmp_path)
    run(path, catalog_config, identifier)
    deltalake.DeltaTable(str(path)).delete("label = 'p1'")
    result = run(path, catalog_config, identifier, full=True)
    table = load(catalog_config, identifier)
    assert table.metadata.current_snapshot_id == result.snapshot_id
    assert table.current_snapshot().summary.operation.value == "overwrite"  # type: ignore[union-attr]
    assert rows_of(table.scan().to_arrow()) == delta_rows(path)


# --------------------------------------------------------------------------------------------- concurrency


def foreign_append(config: dict[str, str], identifier: str, _location: str) -> None:
    """Someone else appends rows through the catalog (pyiceberg writes its own data files)."""
    load(config, identifier).append(pa.table({"id": pa.array([900], pa.int64()), "label": ["p0"]}))


def same_conversion(config: dict[str, str], identifier: str, location: str) -> None:
    """Another converter commits the same conversion first."""
    point_catalog(open_catalog(CATALOG_NAME, config), identifier, location)


@pytest.mark.parametrize("racer", [foreign_append, same_conversion], ids=["foreign-append", "other-converter"])
def test_concurrent_change_fails_the_commit_cleanly(catalog_config: dict[str, str], identifier: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    racer: Callable[[dict[str, str], str, str], None]) -> None:
    path = make_table(tmp_path)
    first = run(path, catalog_config, identifier)
    write_deltalake(str(path), batch(10, 3), mode="append", partition_by=["label"])
    second = run(path, None, None)  # published next to the Delta log, the catalog not yet told

    catalog = open_catalog(CATALOG_NAME, catalog_config)
    commit = catalog.commit_table

    def commit_after_someone_else(*args: Any) -> Any:
        # The race: the other writer commits after our difference was computed, before our commit.
        racer(catalog_config, identifier, second.metadata_location)
        return commit(*args)

    monkeypatch.setattr(catalog, "commit_table", commit_after_someone_else)
    with pytest.raises(ConcurrentConversionError, match="changed during the conversion"):
        point_catalog(catalog, identifier, second.metadata_location)

    # The catalog holds exactly what the other writer committed, and reads.
    table = load(catalog_config, identifier)
    if racer is same_conversion:
        assert table.metadata.current_snapshot_id == second.snapshot_id
        assert rows_of(table.scan().to_arrow()) == delta_rows(path)
        # Running again converges: nothing left to commit.
        assert run(path, catalog_config, identifier).mode == "up-to-date"
        assert load(catalog_config, identifier).metadata_location == table.metadata_location
    else:
        assert rows_of(table.scan().to_arrow()) == sorted(delta_rows(path, first.delta_version) + [(900, "p0")])
        # The next conversion refuses to drop the other writer's commit.
        with pytest.raises(CatalogError, match="which no conversion wrote"):
            point_catalog(open_catalog(CATALOG_NAME, catalog_config), identifier, second.metadata_location)
        assert load(catalog_config, identifier).metadata_location == table.metadata_location


# ------------------------------------------------------------------------------------------------ expiry


def test_expiry_removes_snapshots_in_the_catalog(catalog_config: dict[str, str], identifier: str,
                                                 tmp_path: Path) -> None:
    path = make_table(tmp_path)
    run(path, catalog_config, identifier)
    for start in (10, 20, 30):
        write_deltalake(str(path), batch(start, 2), mode="append", partition_by=["label"])
    run(path, catalog_config, identifier)
    before = load(catalog_config, identifier).metadata
    assert len(before.snapshots) == 4

    write_deltalake(str(path), batch(40, 2), mode="append", partition_by=["label"])
    result = run(path, catalog_config, identifier, retain_snapshots=2)
    assert result.snapshots_expired == 3
    table = load(catalog_config, identifier)
    ours = our_metadata(result)
    kept = sorted(s.snapshot_id for s in table.metadata.snapshots)
    assert kept == sorted(s.snapshot_id for s in ours.snapshots) and len(kept) == 2
    assert table.metadata.current_snapshot_id == result.snapshot_id
    assert {e.snapshot_id for e in table.metadata.snapshot_log} <= set(kept)
    # The metadata files of expired snapshots are gone; the catalog reads the retained ones.
    expired = [s for s in before.snapshots if s.snapshot_id not in kept]
    assert expired and not any(Path(s.manifest_list.removeprefix("file:")).exists() for s in expired)
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])  # type: ignore[index]
        assert catalog_rows(catalog_config, identifier, snapshot.snapshot_id) == delta_rows(path, version)


def test_the_catalog_deletes_its_metadata_files_beyond_the_kept_versions(
        catalog_config: dict[str, str], identifier: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog writes a metadata file per commit; those that fall out of its metadata log (the table's
    write.metadata.previous-versions-max) are deleted, and the catalog still reads every kept snapshot."""
    monkeypatch.setitem(convert_commit.METADATA_FILE_DEFAULTS, "write.metadata.previous-versions-max", "2")
    path = make_table(tmp_path)
    run(path, catalog_config, identifier)
    for start in range(10, 60, 10):
        write_deltalake(str(path), batch(start, 2), mode="append", partition_by=["label"])
        run(path, catalog_config, identifier)

    table = load(catalog_config, identifier)
    metadata_dir = path / "_iceberg" / "metadata"
    catalog_files = sorted(p.name for p in metadata_dir.glob("*.metadata.json") if not p.name.startswith("v"))
    named = [table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)]
    assert len(table.metadata.metadata_log) == 2
    assert catalog_files == sorted(Path(n.removeprefix("file:")).name for n in named if "/v" not in n)
    assert len(catalog_files) <= 3  # the current file and at most two earlier ones, after six commits
    assert sorted(p.name for p in metadata_dir.glob("v*.metadata.json")) == [
        "v4.metadata.json", "v5.metadata.json", "v6.metadata.json"]
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])  # type: ignore[index]
        assert catalog_rows(catalog_config, identifier, snapshot.snapshot_id) == delta_rows(path, version)


# ------------------------------------------------------------------------------------- restarted history


def enable_column_mapping(path: Path) -> int:
    """A Delta commit switching column mapping to name mode (physical names = logical names, so the files stay
    readable): the conversion restarts its Iceberg history, as column ids change meaning."""
    first = json.loads(next(line for line in (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
                            if '"metaData"' in line))["metaData"]
    schema = json.loads(first["schemaString"])
    for i, field in enumerate(schema["fields"], start=1):
        field["metadata"] = {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": field["name"]}
    first["schemaString"] = json.dumps(schema)
    first["configuration"] = {**first.get("configuration", {}), "delta.columnMapping.mode": "name",
                              "delta.columnMapping.maxColumnId": str(len(schema["fields"]))}
    version = deltalake.DeltaTable(str(path)).version() + 1
    actions = [{"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "SET TBLPROPERTIES"}},
               {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}, {"metaData": first}]
    (path / "_delta_log" / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return version


@pytest.mark.parametrize("kind", [*UPDATE_CATALOGS, "sql-pointer"])
def test_restarted_history(kind: str, identifier: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    config = catalog_config_for(kind, request, tmp_path)
    path = make_table(tmp_path)
    first = run(path, config, identifier)
    before = load(config, identifier).metadata_location
    enable_column_mapping(path)
    if kind == "sql-pointer":
        # The pointer moves onto our file whatever it holds.
        result = run(path, config, identifier)
        assert load(config, identifier).metadata_location == result.metadata_location
    else:
        with pytest.raises(CatalogError, match="restarted its history.*register the converted table under a new"):
            run(path, config, identifier)
        assert load(config, identifier).metadata_location == before
        assert catalog_rows(config, identifier) == delta_rows(path, first.delta_version)
        # A new identifier registers the restarted table.
        other = identifier.replace(".events", ".events_v2")
        result = run(path, config, other)
        assert load(config, other).metadata.current_snapshot_id == result.snapshot_id
    assert catalog_rows(config, identifier if kind == "sql-pointer" else other) == delta_rows(path, first.delta_version)


# ---------------------------------------------------------------------------------- which path each catalog takes


def test_sql_catalog_moves_the_pointer_unless_told(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/c.db"
    assert commit_mode(SqlCatalog("c", uri=uri)) == "pointer"
    assert commit_mode(SqlCatalog("c", uri=uri, **{COMMIT_MODE_PROPERTY: "pointer"})) == "pointer"
    assert commit_mode(SqlCatalog("c", uri=uri, **{COMMIT_MODE_PROPERTY: "updates"})) == "updates"
    with pytest.raises(CatalogError, match="must be 'pointer' or 'updates'"):
        commit_mode(SqlCatalog("c", uri=uri, **{COMMIT_MODE_PROPERTY: "swap"}))


def test_every_other_catalog_commits_updates(rest_server: Any) -> None:
    rest = open_catalog("c", {"type": "rest", "uri": rest_server.uri})
    assert commit_mode(rest) == "updates"
    # Any Catalog that is not pyiceberg's SqlCatalog: the rule has no per-type list to forget a catalog in.
    assert commit_mode(NoopCatalog("c")) == "updates"
    with pytest.raises(CatalogError, match="only possible for the SQL catalog"):
        commit_mode(NoopCatalog("c", **{COMMIT_MODE_PROPERTY: "pointer"}))


def test_glue_commits_updates() -> None:
    """Glue (no server here): its pyiceberg catalog takes the updates path, which pyiceberg applies client-side like
    the SQL catalog in updates mode tested above. Its driver, boto3, comes with the test extra (moto, s3fs).

    Hive is not tried: pyiceberg's HiveCatalog cannot even be imported without thrift, which no project file
    installs, and the rule is the type test above (every catalog but SqlCatalog), which NoopCatalog, REST and
    Glue exercise."""
    from pyiceberg.catalog.glue import GlueCatalog

    assert not issubclass(GlueCatalog, SqlCatalog)
    assert commit_mode(GlueCatalog("c", **{"glue.region": "eu-west-1"})) == "updates"


@pytest.mark.parametrize("kind", ["sql", "rest"])
def test_v3_tables_in_catalogs(kind: str, identifier: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Iceberg v3 conversions registered and moved on by the SQL catalog's pointer and by a REST catalog."""
    config = catalog_config_for(kind, request, tmp_path)
    path = make_table(tmp_path)
    run(path, config, identifier, format_version=3)
    assert load(config, identifier).metadata.format_version == 3
    write_deltalake(str(path), batch(10, 5), mode="append", partition_by=["label"])
    second = run(path, config, identifier)
    assert second.mode == "incremental"
    table = load(config, identifier)
    assert table.metadata.format_version == 3
    assert table.metadata.current_snapshot_id == second.snapshot_id
    assert table.metadata.next_row_id == our_metadata(second).next_row_id == 15
    assert rows_of(table.scan().to_arrow()) == delta_rows(path)


def test_v3_refused_before_anything_is_written_where_pyiceberg_writes_the_metadata(tmp_path: Path) -> None:
    """Catalogs whose commits have pyiceberg write the metadata file (Glue, Hive, SQL told to commit updates) cannot
    take v3 tables (pyiceberg 0.12 writes no v3 metadata): the conversion says so before writing anything."""
    config = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", COMMIT_MODE_PROPERTY: "updates"}
    path = make_table(tmp_path)
    with pytest.raises(CatalogError, match="cannot take Iceberg format version 3"):
        run(path, config, "ns.events", format_version=3)
    assert not (path / "_iceberg").exists()
    assert run(path, config, "ns.events").metadata_location.endswith("v1.metadata.json")  # v2 goes through


# ------------------------------------------------------------------------------- a new history (table recreated)


def recreate_table(path: Path) -> None:
    """Delete the Delta table (its log and data files; ``_iceberg`` stays) and write another one at the path."""
    shutil.rmtree(path / "_delta_log")
    for data in path.rglob("*.parquet"):
        if "_iceberg" not in data.parts:
            data.unlink()
    write_deltalake(str(path), batch(100, 5), partition_by=["label"])


def iceberg_files(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in (path / "_iceberg").rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", [*UPDATE_CATALOGS, "sql-pointer"])
def test_new_history_is_decided_with_the_catalog_before_anything_is_written(
        kind: str, identifier: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A catalog that commits updates cannot re-point an identifier to another table uuid: the run refuses before
    it writes any file (naming the identifier, both tables and what to do), and once the entry is dropped the next
    run registers the new history. The SQL catalog's pointer moves onto it."""
    config = catalog_config_for(kind, request, tmp_path)
    path = make_table(tmp_path)
    first = run(path, config, identifier)
    old_uuid = str(load(config, identifier).metadata.table_uuid)
    old_id = deltalake.DeltaTable(str(path)).metadata().id
    recreate_table(path)
    new_id = deltalake.DeltaTable(str(path)).metadata().id
    new_uuid = table_uuid_for(new_id)
    if kind == "sql-pointer":
        result = run(path, config, identifier)
        assert load(config, identifier).metadata_location == result.metadata_location
        assert str(load(config, identifier).metadata.table_uuid) == new_uuid
        assert catalog_rows(config, identifier) == delta_rows(path)
        return
    before = iceberg_files(path)
    with pytest.raises(CatalogError) as refused:
        run(path, config, identifier)
    message = str(refused.value)
    for part in (identifier, old_uuid, old_id, new_uuid, new_id, "nothing was written", "drop"):
        assert part in message, (part, message)
    # Nothing half-written: no file under _iceberg changed, the catalog still serves the old table.
    assert iceberg_files(path) == before
    assert load(config, identifier).metadata_location == first.metadata_location
    # What the message says to do works: drop the entry (the files stay), convert again.
    open_catalog(CATALOG_NAME, config).drop_table(identifier)
    result = run(path, config, identifier)
    assert result.mode == "full" and any(old_id in w and new_id in w for w in result.warnings)
    assert str(load(config, identifier).metadata.table_uuid) == new_uuid
    assert catalog_rows(config, identifier) == delta_rows(path)
