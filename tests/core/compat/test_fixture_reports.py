"""Compliance reports of the real fixture tables (../shared/fixtures/delta).

Every fixture table gets a report at every level (crc-malformed is not a table); notable tables fail the
rules their logs and files say they must. Each claim about a table was checked against the table itself:
its protocol and metaData, and, for the data rules, its parquet files read with pyarrow (the tests at the
bottom recompute those data findings independently of the rules).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from support.environment import FIXTURES_DIR

from airflow_deltaberg.core.compat import ComplianceReport, Level, rules_for, validate, validate_snapshot
from airflow_deltaberg.core.compat.model import Location
from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.errors import MissingDataFileError, NotADeltaTableError

V1, V2, WV1 = "compat-v1", "compat-v2", "writer-compat-v1"
LEVELS = (V1, V2, WV1)
NOT_A_TABLE = "crc-malformed"  # _delta_log holds only a malformed .crc
#: Tables whose log is complete but whose data files are not part of the fixture.
WITHOUT_DATA_FILES = {"300k-add-files-100-col-partitioned", "app-txn-with-last-updated",
                      "with_checkpoint_no_last_checkpoint"}
#: Fixture tables are small: a sample this large reads every footer (the 300k table has no data files).
ALL_FILES = 10_000


@cache
def _load(name: str) -> tuple[DeltaTable, Snapshot]:
    table = DeltaTable(str(FIXTURES_DIR / name))
    return table, table.snapshot()


@cache
def report(name: str, level: str, data_checks: bool = False) -> ComplianceReport:
    table, snapshot = _load(name)
    return validate_snapshot(snapshot, table, level, data_checks=data_checks, sample_size=ALL_FILES)


def failed(name: str, level: str, data_checks: bool = False) -> set[str]:
    return report(name, level, data_checks).failed_rule_ids


def locations(name: str, level: str, rule_id: str, data_checks: bool = False) -> set[Location]:
    return {v.location for v in report(name, level, data_checks).violations if v.rule_id == rule_id}


# -- every table --------------------------------------------------------------------------------------


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE,))
@pytest.mark.parametrize("level", LEVELS)
def test_every_fixture_table_gets_a_report(fixture_table: str, level: str) -> None:
    _, snapshot = _load(fixture_table)
    r = report(fixture_table, level)
    assert r.table == snapshot.table and r.version == snapshot.version and r.level == level
    assert r.rules_checked == tuple(rule.id for rule in rules_for(Level(level), False))
    assert {v.rule_id for v in r.violations} <= set(r.rules_checked)
    assert r.compliant is (not r.errors)
    assert ComplianceReport.from_dict(r.to_dict()) == r
    # No fixture table is written for Iceberg compatibility: none enables the level's feature.
    assert not r.compliant


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_every_fixture_table_with_its_files_gets_a_data_report(fixture_table: str) -> None:
    _, snapshot = _load(fixture_table)
    for level in LEVELS:
        r = report(fixture_table, level, True)
        assert r.data_checks and r.files_sampled == snapshot.num_files
        assert set(report(fixture_table, level).rules_checked) < set(r.rules_checked)


@pytest.mark.parametrize("name", sorted(WITHOUT_DATA_FILES - {"300k-add-files-100-col-partitioned"}))
def test_data_checks_on_a_table_without_its_files_is_an_error(name: str, fixtures_dir: Path) -> None:
    """The log names files the fixture does not hold: data checks fail with an error naming the file, not
    with a report."""
    table, snapshot = _load(name)
    first = snapshot.state.adds.column("path")[0].as_py()
    assert not (fixtures_dir / name / unquote(first)).exists()
    with pytest.raises(MissingDataFileError, match="missing from storage") as info:
        validate_snapshot(snapshot, table, WV1, data_checks=True)
    assert info.value.table == str(fixtures_dir / name) and info.value.file is not None
    assert unquote(first) in info.value.file


def test_crc_malformed_is_not_a_delta_table(fixtures_dir: Path) -> None:
    with pytest.raises(NotADeltaTableError):
        validate(str(fixtures_dir / NOT_A_TABLE), WV1)


# -- notable tables -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _needs_fixtures(fixtures_dir: Path) -> None:
    """Skip when ../shared/fixtures is absent (fixtures_dir skips)."""


def test_deletion_vectors_table_with_dv_small() -> None:
    """Protocol 3/7 with deletionVectors, delta.enableDeletionVectors=true, its one live file has a DV."""
    name = "table-with-dv-small"
    assert {"deletion-vectors.not-supported", "deletion-vectors.no-live-files", "protocol.reader-version",
            "column-mapping.mode"} <= failed(name, V1)
    assert {"deletion-vectors.not-active", "deletion-vectors.no-live-files"} <= failed(name, V2)
    assert "deletion-vectors.not-supported" not in report(name, V2).rules_checked  # a V1 rule only
    assert {"deletion-vectors.not-active", "deletion-vectors.no-live-files", "features.allowlist",
            "column-mapping.id-mode"} <= failed(name, WV1)
    assert locations(name, WV1, "features.allowlist") == {Location("feature", "deletionVectors")}
    assert locations(name, V2, "deletion-vectors.not-active") == {Location("property", "delta.enableDeletionVectors")}
    (dv,) = [v for v in report(name, V2).violations if v.rule_id == "deletion-vectors.no-live-files"]
    assert dv.message.startswith("1 live file(s)")


@pytest.mark.parametrize("name", ["with-short-dv", "cdf-table-with-cdc-and-dvs", "compacted-log-files-table"])
def test_more_tables_with_live_deletion_vectors(name: str) -> None:
    snapshot = _load(name)[1]
    assert snapshot.files.column("deletionVector").combine_chunks().null_count < snapshot.num_files
    for level in LEVELS:
        assert "deletion-vectors.no-live-files" in failed(name, level)


@pytest.mark.parametrize("level", LEVELS)
def test_no_column_mapping_basic_partitioned(level: str) -> None:
    """Protocol 1/2, no delta.columnMapping.mode, partitioned by `number`, files written without it."""
    name = "basic_partitioned"
    mode_rule = "column-mapping.id-mode" if level == WV1 else "column-mapping.mode"
    expected = {mode_rule, "protocol.reader-version", "protocol.writer-version", f"protocol.feature.{level}"}
    assert expected <= failed(name, level)
    assert "protocol.feature.column-mapping" not in failed(name, level)  # only checked on writer version 7
    assert locations(name, level, "protocol.reader-version") == {Location("protocol", "minReaderVersion")}
    assert locations(name, level, mode_rule) == {Location("property", "delta.columnMapping.mode")}
    # Without column mapping there is nothing to compare field ids with; column ids are not reported twice.
    assert not failed(name, level, True) & {"data.parquet-field-ids", "column-mapping.field-id"}
    assert "data.partition-values-materialized" in failed(name, level, True)


def test_name_mode_cdf_column_mapping_name_mode() -> None:
    """Protocol 2/5, column mapping in name mode, change data feed on, files without parquet field ids."""
    name = "cdf-column-mapping-name-mode"
    v2 = failed(name, V2, True)
    assert {"protocol.writer-version", "protocol.feature.compat-v2", "property.enable-compat-v2",
            "data.parquet-field-ids"} <= v2
    assert not v2 & {"column-mapping.mode", "protocol.reader-version", "column-mapping.field-id"}
    wv1 = failed(name, WV1)
    assert {"column-mapping.id-mode", "column-mapping.physical-name-format", "disallowed.change-data-feed"} <= wv1
    assert "column-mapping.mode" not in wv1
    assert locations(name, WV1, "column-mapping.physical-name-format") == {
        Location("column", c) for c in ("id", "name", "value")}


def test_id_mode_with_uuid_physical_names() -> None:
    """cdf-column-mapping-id-mode and partition_cm/id: id mode, but physical names col-<uuid>."""
    for name in ("cdf-column-mapping-id-mode", "partition_cm/id"):
        wv1 = failed(name, WV1, True)
        assert "column-mapping.physical-name-format" in wv1
        assert not wv1 & {"column-mapping.id-mode", "column-mapping.field-id", "column-mapping.unique-ids",
                          "column-mapping.max-column-id", "data.parquet-field-ids"}
    # partition_cm/id: 3/7 with columnMapping, no files at all.
    assert failed("partition_cm/id", V2, True) == {"protocol.feature.compat-v2", "property.enable-compat-v2"}
    assert report("partition_cm/id", V2, True).files_sampled == 0


@pytest.mark.parametrize("mode, v2_mode_fails, wv1_id_fails", [("id", False, False), ("name", False, True),
                                                                ("none", True, True)])
def test_partition_cm(mode: str, v2_mode_fails: bool, wv1_id_fails: bool) -> None:
    name = f"partition_cm/{mode}"
    assert ("column-mapping.mode" in failed(name, V2)) is v2_mode_fails
    assert ("column-mapping.id-mode" in failed(name, WV1)) is wv1_id_fails


def test_type_widening_preview_is_not_allowlisted() -> None:
    """writerFeatures [timestampNtz, typeWidening-preview, appendOnly, invariants]: only the preview name is
    outside the allowlist (typeWidening is in it, invariants may be supported while inactive)."""
    name = "type-widening"
    assert locations(name, WV1, "features.allowlist") == {Location("feature", "typeWidening-preview")}
    assert "disallowed.invariants" not in failed(name, WV1)
    assert "types.no-byte-short" not in failed(name, WV1)  # every byte/short column was widened


def test_all_types_table_stats_writing_all_types() -> None:
    """Name mode, byte/short columns, an array and a map without nested ids, timestamps as INT96."""
    name = "stats-writing-all-types/delta"
    v2 = failed(name, V2, True)
    assert {"nested-ids.present", "data.timestamp-int64"} <= v2
    assert not v2 & {"types.no-byte-short", "types.compat-v2-allowlist", "column-mapping.mode",
                     "data.parquet-field-ids", "data.num-records"}
    assert {"types.no-byte-short", "column-mapping.id-mode", "column-mapping.physical-name-format"} <= failed(
        name, WV1, True)
    assert locations(name, WV1, "types.no-byte-short") == {Location("column", "byte_col"),
                                                          Location("column", "short_col")}
    assert locations(name, V2, "nested-ids.present") == {
        Location("column", "array_col.element"), Location("column", "map_col.key"), Location("column", "map_col.value")}
    timestamp_physical = _load(name)[1].schema.field("timestamp_col").physical_name
    (int96,) = [v for v in report(name, V2, True).violations if v.rule_id == "data.timestamp-int64"]
    assert timestamp_physical in int96.message
    assert "data.timestamp-int64" not in report(name, V1, True).rules_checked  # not a V1 requirement


@pytest.mark.parametrize("name", ["timestamp-truncation-stats", "with-short-dv", "parquet_row_group_skipping"])
def test_int96_timestamps(name: str) -> None:
    assert "data.timestamp-int64" in failed(name, V2, True)
    assert "data.timestamp-int64" in failed(name, WV1, True)


def test_checkpoint_without_stats_parquet_row_group_skipping() -> None:
    """Commit 1 carried {"numRecords":5}, but the version-1 checkpoint (the table's state) was written
    without a stats column: the live file has no numRecords."""
    name = "parquet_row_group_skipping"
    adds = []
    for part in sorted((FIXTURES_DIR / name / "_delta_log").glob("00000000000000000001.checkpoint.*.parquet")):
        checkpoint = pq.read_table(part)
        if "add" in checkpoint.column_names:
            adds += [a for a in checkpoint.column("add").to_pylist() if a is not None]
    assert len(adds) == 1 and adds[0].get("stats") is None  # the part holding it has no stats column
    assert "data.num-records" in failed(name, V1, True)
    assert {"types.no-byte-short"} <= failed(name, WV1)
    assert locations(name, WV1, "types.no-byte-short") == {Location("column", "numeric.ints.int16"),
                                                          Location("column", "numeric.ints.int8")}


def test_variant_geo_void_tables() -> None:
    assert {"disallowed.variant", "types.compat-v2-allowlist"} <= failed("unshredded-variant", WV1)
    assert Location("feature", "variantType-preview") in locations("unshredded-variant", WV1, "disallowed.variant")
    assert Location("column", "v") in locations("unshredded-variant", WV1, "disallowed.variant")
    assert {"types.compat-v2-allowlist", "features.allowlist"} <= failed("table-with-geo", WV1)
    assert locations("table-with-geo", V2, "types.compat-v2-allowlist") == {
        Location("column", "geom"), Location("column", "geog")}
    assert locations("void-column", V2, "types.compat-v2-allowlist") == {Location("column", "void_col")}
    assert locations("void-column", V1, "types.compat-v1-no-map-array-void") == {Location("column", "void_col")}


def test_row_tracking_and_clustering_crc_full() -> None:
    """writerFeatures [domainMetadata, clustering, deletionVectors, rowTracking]."""
    name = "crc-full"
    assert {"disallowed.row-tracking", "deletion-vectors.not-active"} <= failed(name, WV1)
    # rowTracking has its own rule; domainMetadata and clustering are allowed.
    assert locations(name, WV1, "features.allowlist") == {Location("feature", "deletionVectors")}


def test_change_data_feed_tables() -> None:
    for name in ("cdf-table", "table-with-cdf", "cdf-table-non-partitioned"):
        assert locations(name, WV1, "disallowed.change-data-feed") == {
            Location("property", "delta.enableChangeDataFeed")}
    assert "types.no-byte-short" in failed("cdf-table-non-partitioned", WV1)  # smallint_field: short


def test_materialize_partition_columns_feature_without_materialized_files() -> None:
    """writerFeatures [materializePartitionColumns], yet the files (written by Spark 3.3) lack `letter`."""
    name = "partitioned_with_materialize_feature"
    assert locations(name, WV1, "features.allowlist") == {Location("feature", "materializePartitionColumns")}
    assert "data.partition-values-materialized" in failed(name, V1, True)


# -- the data findings, recomputed from the files -----------------------------------------------------


def _live_files(name: str) -> list[tuple[str, pq.ParquetFile]]:
    snapshot = _load(name)[1]
    root = FIXTURES_DIR / name
    return [(p, pq.ParquetFile(root / unquote(p))) for p in snapshot.state.adds.column("path").to_pylist()]


def _flagged(name: str, rule_id: str) -> set[str]:
    return {loc.path for loc in locations(name, V2, rule_id, True)}


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_int96_findings_match_the_files(fixture_table: str) -> None:
    files = _live_files(fixture_table)
    int96 = {p for p, f in files if any(f.schema.column(i).physical_type == "INT96" for i in range(len(f.schema)))}
    assert _flagged(fixture_table, "data.timestamp-int64") == int96


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_partition_findings_match_the_files(fixture_table: str) -> None:
    snapshot = _load(fixture_table)[1]
    wanted = set(snapshot.metadata.physical_partition_columns)
    missing = {p for p, f in _live_files(fixture_table) if wanted - set(f.schema_arrow.names)}
    assert _flagged(fixture_table, "data.partition-values-materialized") == missing


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_field_id_findings_match_the_files(fixture_table: str) -> None:
    """Mapped tables: a file is flagged when one of its top-level schema columns lacks the Delta id."""
    snapshot = _load(fixture_table)[1]
    if snapshot.column_mapping_mode == "none":
        assert _flagged(fixture_table, "data.parquet-field-ids") == set()
        return
    ids = {f.physical_name: f.column_mapping_id for f in snapshot.schema.fields}
    bad = set()
    for p, f in _live_files(fixture_table):
        for field in f.schema_arrow:
            actual = (field.metadata or {}).get(b"PARQUET:field_id")
            if field.name in ids and actual != str(ids[field.name]).encode():
                bad.add(p)
    # Top-level ids decide for every fixture table: none has nested ids, and the only column without an id
    # outside the schema is _change_type (cdf-column-mapping-id-mode), which Delta readers drop.
    assert _flagged(fixture_table, "data.parquet-field-ids") == bad
