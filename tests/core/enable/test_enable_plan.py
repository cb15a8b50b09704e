"""plan_enable on real tables: the reasons to rewrite, the blockers, and a target state that the validator accepts.

Tables: written by deltalake (no column mapping, partitioned, name mode, byte/short columns, empty), copied
fixtures (deletion vectors, Delta on Spark id mode), and id-mode tables written with the compat test helpers
(compliant files, or files breaking one data requirement each).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.tables import id_mode_table

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.commit import write_commit
from airflow_deltaberg.core.delta.schema import parse_schema
from airflow_deltaberg.core.enable.create import create_table
from airflow_deltaberg.core.enable.plan import (
    DELETION_VECTORS,
    FIELD_IDS,
    INT96,
    NAME_MODE,
    NO_COLUMN_MAPPING,
    NUM_RECORDS,
    PARTITION_VALUES,
    PHYSICAL_NAMES,
    WIDEN_TYPES,
    EnablePlan,
    plan_enable,
)


def plan_of(path: Path) -> EnablePlan:
    return plan_enable(DeltaTable(str(path)).snapshot())


def assert_target_compliant(plan: EnablePlan, tmp_path: Path) -> None:
    """The plan's protocol and metadata, committed as version 0 of an empty table, pass the validator."""
    target = tmp_path / "target-state"
    write_commit(DeltaTable(str(target)), [{"protocol": plan.protocol}, {"metaData": plan.metadata}],
                 read_version=None, operation="TEST")
    report = validate(str(target), data_checks=True)
    assert report.compliant, report.to_text()


def fields(plan: EnablePlan) -> dict[str, Any]:
    return {f.name: f for f in parse_schema(plan.metadata["schemaString"]).fields}


# -- deltalake tables ------------------------------------------------------------------------------------


def test_plain_table_needs_rewrite_for_column_mapping(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("plain")
    before = DeltaTable(str(path)).snapshot()
    plan = plan_of(path)
    assert plan.reason_codes == (NO_COLUMN_MAPPING,)
    assert plan.needs_rewrite and not plan.blockers and not plan.already_enabled
    assert plan.read_version == 0 and plan.num_files == 1
    assert plan.protocol == {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
                             # deltalake's 1/2 protocol implies appendOnly and invariants: carried over
                             "writerFeatures": ["appendOnly", "columnMapping", "icebergCompatV2",
                                                "icebergWriterCompatV1", "invariants"]}
    md = plan.metadata
    assert md["id"] == before.metadata.id and md["partitionColumns"] == []
    assert md["configuration"] == {"delta.columnMapping.mode": "id", "delta.enableIcebergCompatV2": "true",
                                   "delta.enableIcebergWriterCompatV1": "true",
                                   "delta.columnMapping.maxColumnId": "8"}
    f = fields(plan)
    # Column ids in schema order (nested struct fields included), then the nested id of tags' element.
    assert [(n, f[n].column_mapping_id, f[n].physical_name) for n in f] == [
        ("id", 1, "col-1"), ("name", 2, "col-2"), ("part", 3, "col-3"), ("tags", 4, "col-4"), ("point", 5, "col-5")]
    assert f["tags"].metadata["delta.columnMapping.nested.ids"] == {"col-4.element": 8}
    assert [(s.name, s.column_mapping_id) for s in f["point"].type.fields] == [("x", 6), ("y", 7)]
    assert_target_compliant(plan, tmp_path)


def test_partitioned_table_also_needs_partition_values(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    plan = plan_of(deltalake_table("parted", partition_by=["part"]))
    assert plan.reason_codes == (NO_COLUMN_MAPPING, PARTITION_VALUES)
    assert "part" in plan.reasons[1]
    assert plan.metadata["partitionColumns"] == ["part"]
    assert_target_compliant(plan, tmp_path)


def test_name_mode_keeps_ids_and_renames(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("named", configuration={"delta.columnMapping.mode": "name"})
    old = {f.name: f for f in DeltaTable(str(path)).snapshot().schema.fields}
    assert all(f.physical_name != f"col-{f.column_mapping_id}" for f in old.values())
    plan = plan_of(path)
    assert plan.reason_codes == (NAME_MODE,)
    new = fields(plan)
    for name, f in new.items():
        assert f.column_mapping_id == old[name].column_mapping_id
        assert f.physical_name == f"col-{f.column_mapping_id}"
    assert_target_compliant(plan, tmp_path)


def test_byte_and_short_columns_are_widened(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    data = pa.table({"b": pa.array([1, -2, None], pa.int8()), "s": pa.array([300, None, -7], pa.int16()),
                     "l": pa.array([[1], None, [2, 3]], pa.list_(pa.int16()))})
    plan = plan_of(deltalake_table("narrow", data=data))
    assert plan.reason_codes == (NO_COLUMN_MAPPING, WIDEN_TYPES)
    assert "b, s, l.element" in plan.reasons[1]
    f = fields(plan)
    assert [str(f["b"].type), str(f["s"].type), str(f["l"].type)] == ["integer", "integer", "array<integer>"]
    assert_target_compliant(plan, tmp_path)


@pytest.mark.parametrize("configuration", [None, {"delta.columnMapping.mode": "name"}], ids=["none", "name"])
def test_empty_table_needs_no_rewrite(deltalake_table: Callable[..., Path], rows: pa.Table, tmp_path: Path,
                                      configuration: dict[str, str] | None) -> None:
    plan = plan_of(deltalake_table("empty", data=rows.slice(0, 0), configuration=configuration))
    assert plan.num_files == 0
    assert not plan.needs_rewrite and plan.reasons == () and plan.blockers == ()
    assert any("upgrade the protocol" in c for c in plan.changes)
    assert_target_compliant(plan, tmp_path)


def test_already_enabled_table(tmp_path: Path) -> None:
    create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    plan = plan_of(tmp_path / "t")
    assert plan.already_enabled and not plan.needs_rewrite and plan.changes == ()


# -- copied fixtures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["table-with-dv-small", "with-short-dv"])
def test_deletion_vectors_are_applied_and_the_feature_dropped(copy_fixture: Callable[[str], Path], tmp_path: Path,
                                                              name: str) -> None:
    path = copy_fixture(name)
    assert "deletionVectors" in DeltaTable(str(path)).snapshot().protocol.effective_reader_features
    plan = plan_of(path)
    assert plan.reason_codes[:2] == (NO_COLUMN_MAPPING, DELETION_VECTORS)
    assert not plan.blockers
    assert "deletionVectors" not in plan.protocol["readerFeatures"] + plan.protocol["writerFeatures"]
    assert plan.metadata["configuration"]["delta.enableDeletionVectors"] == "false"
    assert any("drop table feature deletionVectors" in c for c in plan.changes)
    assert_target_compliant(plan, tmp_path)


def test_spark_id_mode_table_with_uuid_names_and_cdf(copy_fixture: Callable[[str], Path]) -> None:
    """Delta on Spark's id mode uses col-<uuid> names; change data feed is on: a blocker, not dropped."""
    plan = plan_of(copy_fixture("cdf-column-mapping-id-mode"))
    assert PHYSICAL_NAMES in plan.reason_codes
    assert plan.blockers == ("change data feed is active (delta.enableChangeDataFeed=true): set it to false first "
                             "(consumers of the change feed lose it)",)
    assert plan.metadata["configuration"]["delta.enableChangeDataFeed"] == "true"  # not silently turned off


def test_empty_id_mode_fixture_renames_without_rewrite(copy_fixture: Callable[[str], Path], tmp_path: Path) -> None:
    plan = plan_of(copy_fixture("partition_cm/id"))
    assert not plan.needs_rewrite and not plan.blockers
    assert fields(plan)["value"].physical_name == "col-1"
    assert_target_compliant(plan, tmp_path)


# -- id-mode tables with col-<id> names (compat test helpers) -----------------------------------------------

def test_id_mode_table_with_compliant_files_is_metadata_only(tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    plan = plan_of(path)
    assert not plan.needs_rewrite and plan.reasons == () and plan.blockers == ()
    assert not plan.already_enabled
    assert plan.changes == ("add table feature(s) icebergWriterCompatV1",
                            "set delta.enableIcebergWriterCompatV1=true")
    # Ids, names and nested ids are the table's own: the files stay valid.
    before = DeltaTable(str(path)).snapshot().metadata.schema_string
    assert json.loads(plan.metadata["schemaString"]) == json.loads(before)


@pytest.mark.parametrize(("options", "code"), [
    ({"materialize_partitions": False}, PARTITION_VALUES),
    ({"stats": "without-num-records"}, NUM_RECORDS),
    ({"stats": "none"}, NUM_RECORDS),
    ({"field_ids": False}, FIELD_IDS),
    ({"int96_timestamps": True}, INT96),
])
def test_id_mode_table_files_decide(tmp_path: Path, options: dict[str, Any], code: str) -> None:
    plan = plan_of(id_mode_table(tmp_path / "t", **options))
    assert plan.reason_codes == (code,)
    assert plan.needs_rewrite


def test_footer_checks_can_be_skipped(tmp_path: Path) -> None:
    snapshot = DeltaTable(str(id_mode_table(tmp_path / "t", field_ids=False))).snapshot()
    assert plan_enable(snapshot, footer_checks=False).reasons == ()


# -- blockers ----------------------------------------------------------------------------------------------


def _with(path: Path, *, config: dict[str, str] | None = None, column_metadata: dict[str, Any] | None = None,
          features: list[str] | None = None) -> None:
    """Commit a metadata (and protocol) change to a deltalake table with the project's commit writer."""
    table = DeltaTable(str(path))
    snap = table.snapshot()
    md = snap.metadata.to_action()
    md["configuration"] = {**md["configuration"], **(config or {})}
    schema = json.loads(md["schemaString"])
    schema["fields"][0]["metadata"].update(column_metadata or {})
    md["schemaString"] = json.dumps(schema)
    actions: list[dict[str, Any]] = [{"metaData": md}]
    if features:
        actions.insert(0, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
                                        "writerFeatures": ["appendOnly", "invariants", *features]}})
    write_commit(table, actions, read_version=snap.version, operation="TEST")


@pytest.mark.parametrize(("change", "needle"), [
    ({"config": {"delta.constraints.positive": "id > 0"}}, "CHECK constraint positive"),
    ({"column_metadata": {"delta.generationExpression": "1"}}, "column id is a generated column"),
    ({"column_metadata": {"delta.identity.start": 1, "delta.identity.step": 1}}, "column id is an identity column"),
    ({"column_metadata": {"delta.invariants": "{}"}}, "column id has an invariant"),
    ({"config": {"delta.enableChangeDataFeed": "true"}}, "change data feed is active"),
    ({"features": ["rowTracking", "domainMetadata"]}, "table feature rowTracking"),
    ({"features": ["allowColumnDefaults"]}, "table feature allowColumnDefaults"),
])
def test_blockers_are_reported(deltalake_table: Callable[..., Path], change: dict[str, Any], needle: str) -> None:
    path = deltalake_table("t")
    _with(path, **change)
    plan = plan_of(path)
    assert len(plan.blockers) == 1 and needle in plan.blockers[0], plan.blockers
    # Nothing active is dropped from the target: the user has to act.
    if "config" in change:
        for key, value in change["config"].items():
            assert plan.metadata["configuration"][key] == value


def test_active_iceberg_compat_v1_is_superseded(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("t")
    _with(path, config={"delta.enableIcebergCompatV1": "true"}, features=["icebergCompatV1"])
    plan = plan_of(path)
    assert not plan.blockers
    assert "icebergCompatV1" not in plan.protocol["writerFeatures"]
    assert plan.metadata["configuration"]["delta.enableIcebergCompatV1"] == "false"
    assert "drop table feature icebergCompatV1 from the protocol and set delta.enableIcebergCompatV1=false" in (
        plan.changes)
    assert_target_compliant(plan, tmp_path)


# -- other levels ------------------------------------------------------------------------------------------


def assert_target_compliant_at(plan: EnablePlan, tmp_path: Path, level: str) -> None:
    target = tmp_path / f"target-{level}"
    write_commit(DeltaTable(str(target)), [{"protocol": plan.protocol}, {"metaData": plan.metadata}],
                 read_version=None, operation="TEST")
    report = validate(str(target), level, data_checks=True)
    assert report.compliant, report.to_text()


def test_compat_v2_keeps_name_mode_physical_names(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("named", configuration={"delta.columnMapping.mode": "name"})
    old = {f.name: f for f in DeltaTable(str(path)).snapshot().schema.fields}
    plan = plan_enable(DeltaTable(str(path)).snapshot(), level="compat-v2")
    assert plan.level == "compat-v2"
    assert NAME_MODE not in plan.reason_codes and PHYSICAL_NAMES not in plan.reason_codes
    new = fields(plan)
    for name, f in new.items():
        assert (f.column_mapping_id, f.physical_name) == (old[name].column_mapping_id, old[name].physical_name)
    config = plan.metadata["configuration"]
    assert config["delta.columnMapping.mode"] == "name" and config["delta.enableIcebergCompatV2"] == "true"
    assert "delta.enableIcebergWriterCompatV1" not in config
    assert "icebergWriterCompatV1" not in plan.protocol["writerFeatures"]
    assert_target_compliant_at(plan, tmp_path, "compat-v2")


def test_compat_v2_keeps_byte_short_and_allows_cdf(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    data = pa.table({"b": pa.array([1, -2, None], pa.int8()), "s": pa.array([300, None, -7], pa.int16())})
    path = deltalake_table("narrow", data=data, configuration={"delta.enableChangeDataFeed": "true"})
    assert plan_of(path).blockers  # IcebergWriterCompatV1 forbids the change data feed
    plan = plan_enable(DeltaTable(str(path)).snapshot(), level="compat-v2")
    assert plan.blockers == ()
    assert plan.reason_codes == (NO_COLUMN_MAPPING,)
    assert [str(f.type) for f in fields(plan).values()] == ["byte", "short"]
    assert_target_compliant_at(plan, tmp_path, "compat-v2")


def test_writer_compat_v3_on_an_empty_table(deltalake_table: Callable[..., Path], rows: pa.Table,
                                            tmp_path: Path) -> None:
    plan = plan_enable(DeltaTable(str(deltalake_table("empty", data=rows.slice(0, 0)))).snapshot(),
                       level="writer-compat-v3")
    assert not plan.needs_rewrite and plan.blockers == ()
    assert {"columnMapping", "icebergCompatV3", "icebergWriterCompatV3", "rowTracking", "domainMetadata"} <= set(
        plan.protocol["writerFeatures"])
    assert not {"icebergCompatV2", "icebergWriterCompatV1"} & set(plan.protocol["writerFeatures"])
    config = plan.metadata["configuration"]
    assert {k: config[k] for k in ("delta.columnMapping.mode", "delta.enableIcebergCompatV3",
                                   "delta.enableIcebergWriterCompatV3", "delta.enableRowTracking")} == {
        "delta.columnMapping.mode": "id", "delta.enableIcebergCompatV3": "true",
        "delta.enableIcebergWriterCompatV3": "true", "delta.enableRowTracking": "true"}
    assert config["delta.rowTracking.materializedRowIdColumnName"].startswith("_row-id-col-")
    assert all(f.physical_name == f"col-{f.column_mapping_id}" for f in fields(plan).values())


def test_unknown_level() -> None:
    with pytest.raises(ValueError, match="level must be one of writer-compat-v1, compat-v2, writer-compat-v3"):
        from airflow_deltaberg.core.enable.levels import enable_level

        enable_level("compat-v1")
