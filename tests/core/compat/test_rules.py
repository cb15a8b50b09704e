"""Every compliance rule, against real tables: one that breaks it (the rule fails, at the right location)
and one that keeps it (the rule is silent).

Tables come from real writers: deltalake (``write_deltalake``, column mapping via the
``delta.columnMapping.mode`` configuration, constraints, generated columns) and this project's commit
writer with the offending action (see ``tables.py``), with parquet files written by pyarrow.

``CASES`` maps each rule id to its two tables; ``test_every_rule_has_a_case`` fails when a rule is added to
RULES without a case here (or a case outlives its rule).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as PeerTable
from deltalake import write_deltalake
from deltalake.schema import Field, PrimitiveType, Schema
from support.compat_tables import (
    COMPLIANT_PROTOCOL,
    INLINE_DV,
    NESTED_IDS,
    BuiltTable,
    add_files,
    array,
    create_compliant_table,
    map_,
    struct,
)

from airflow_deltaberg.core.compat import RULES, RULES_BY_ID, ComplianceReport, validate
from airflow_deltaberg.core.compat.model import Location
from airflow_deltaberg.core.errors import CorruptLogError

V1, V2, WV1 = "compat-v1", "compat-v2", "writer-compat-v1"
V3, WV3 = "compat-v3", "writer-compat-v3"
UTC = dt.timezone.utc

# -- schemas and rows -----------------------------------------------------------------------------------

#: Column ids: id 1, name 2, tags 3, props 4, info 5, info.x 6, info.when 7 (and part 8 when partitioned);
#: nested ids follow: tags.element, props.key, props.value (9, 10, 11 when partitioned).
FIELDS = [
    ("id", "long", False),
    ("name", "string"),
    ("tags", array("string")),
    ("props", map_("string", "long")),
    ("info", struct(("x", "integer"), ("when", "timestamp"))),
]
PARTITIONED_FIELDS = [*FIELDS, ("part", "string")]
#: IcebergCompatV1 blocks arrays and maps.
V1_FIELDS = [("id", "long", False), ("name", "string"), ("info", struct(("x", "integer"), ("when", "timestamp")))]
V1_PROTOCOL = {"writerFeatures": ["columnMapping", "icebergCompatV1"]}
V1_PROPERTIES = {
    "delta.enableIcebergCompatV1": "true",
    "delta.enableIcebergCompatV2": None,
    "delta.enableIcebergWriterCompatV1": None,
}


def rows(n: int = 4, *, parts: tuple[str, ...] = ("a", "b c")) -> dict[str, list]:
    """Values for FIELDS (and ``part``, spread over ``parts``: one file per part)."""
    start = dt.datetime(2024, 5, 1, tzinfo=UTC)
    return {
        "id": list(range(n)),
        "name": [f"n{i}" if i % 3 else None for i in range(n)],
        "tags": [[f"t{i}"] * (i % 3) if i % 4 != 3 else None for i in range(n)],
        "props": [{"k": i} if i % 2 else {} for i in range(n)],
        "info": [{"x": i, "when": start + dt.timedelta(minutes=i)} if i % 5 != 4 else None for i in range(n)],
        "part": [parts[i % len(parts)] for i in range(n)],
    }


def v1_rows(n: int = 4) -> dict[str, list]:
    data = rows(n)
    return {k: data[k] for k in ("id", "name", "info")}


def compliant(path: Path, **kwargs) -> BuiltTable:
    """A compliant (IcebergCompatV2 + IcebergWriterCompatV1) table with two files."""
    table = create_compliant_table(path, PARTITIONED_FIELDS, partition_by=["part"], **kwargs)
    add_files(table, rows())
    return table


#: IcebergCompatV3 + IcebergWriterCompatV3 as Delta Kernel 4.4.0 creates them (tests/spark/test_compat_v3_parity.py):
#: row tracking on, deletion vectors allowed, IcebergCompatV2 and IcebergWriterCompatV1 off.
V3_PROTOCOL = {
    "readerFeatures": ["columnMapping", "deletionVectors"],
    "writerFeatures": ["columnMapping", "deletionVectors", "domainMetadata", "rowTracking", "icebergCompatV3",
                       "icebergWriterCompatV3"],
}
V3_PROPERTIES = {
    "delta.enableIcebergCompatV2": None,
    "delta.enableIcebergWriterCompatV1": None,
    "delta.enableIcebergCompatV3": "true",
    "delta.enableIcebergWriterCompatV3": "true",
    "delta.enableRowTracking": "true",
    "delta.enableDeletionVectors": "true",
}


def v3_features(*extra: str, reader: tuple[str, ...] = ()) -> dict[str, list[str]]:
    return {"readerFeatures": [*V3_PROTOCOL["readerFeatures"], *reader],
            "writerFeatures": [*V3_PROTOCOL["writerFeatures"], *reader, *extra]}


def compliant_v3(path: Path, fields: list | None = None, *, partition_by: tuple[str, ...] = ("part",),
                 properties: dict | None = None, protocol: dict | None = None, data: bool = True) -> BuiltTable:
    """A compliant IcebergCompatV3 + IcebergWriterCompatV3 table with two files."""
    table = create_compliant_table(path, fields or PARTITIONED_FIELDS, partition_by=list(partition_by),
                                   extra_properties={**V3_PROPERTIES, **(properties or {})},
                                   protocol_overrides=protocol or V3_PROTOCOL)
    if data:
        add_files(table, rows())
    return table


def compliant_v1(path: Path, **protocol_extra) -> BuiltTable:
    """A compliant IcebergCompatV1 table (no arrays or maps) with one file."""
    protocol = copy.deepcopy(V1_PROTOCOL)
    for key, extra in protocol_extra.items():
        protocol[key] = [*protocol.get(key, COMPLIANT_PROTOCOL[key]), *extra]
    table = create_compliant_table(path, V1_FIELDS, extra_properties=V1_PROPERTIES, protocol_overrides=protocol)
    add_files(table, v1_rows())
    return table


def peer_table(path: Path, mode: str | None, *, partition_by: list[str] | None = None,
               data: pa.Table | None = None) -> Path:
    """A table written by deltalake, with column mapping ``mode`` (None: no column mapping)."""
    if data is None:
        data = pa.table({
            "a": pa.array([1, 2, 3], pa.int64()),
            "l": pa.array([[1], [2, 3], None], pa.list_(pa.int32())),
            "p": ["x", "y", "x"],
        })
    configuration = {"delta.columnMapping.mode": mode} if mode else None
    write_deltalake(str(path), data, partition_by=partition_by, configuration=configuration)
    return path


def edit_field(table: BuiltTable, dotted: str, change: Callable[[dict], None]) -> None:
    """Commit a metaData whose schema has ``change`` applied to the field at ``dotted`` (struct fields only)."""
    schema = table.schema()
    node = schema
    for part in dotted.split("."):
        node = next(f for f in node["fields"] if f["name"] == part)
        target = node
        node = node["type"]
    change(target)
    table.set_schema(schema)


def features(*extra: str, reader: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """protocol_overrides adding writer features (and reader features, listed in both)."""
    return {
        "readerFeatures": [*COMPLIANT_PROTOCOL["readerFeatures"], *reader],
        "writerFeatures": [*COMPLIANT_PROTOCOL["writerFeatures"], *reader, *extra],
    }


# -- the cases ------------------------------------------------------------------------------------------

Broken = tuple[Path, list[Location]]  # the table, and the locations the rule must name


@dataclass(frozen=True)
class Case:
    level: str
    breaks: Callable[[Path], Broken]
    keeps: Callable[[Path], Path]
    data_checks: bool = False


def _file_locations(adds: list[dict]) -> list[Location]:
    return [Location("file", a["path"]) for a in adds]


# protocol ----------------------------------------------------------------------------------------------


def break_reader_version(p: Path) -> Broken:
    t = compliant(p, protocol_overrides={"minReaderVersion": 1, "readerFeatures": None})
    return t.path, [Location("protocol", "minReaderVersion")]


def break_writer_version(p: Path) -> Broken:
    return peer_table(p, "name"), [Location("protocol", "minWriterVersion")]  # deltalake writes 2/5


def break_cm_feature(p: Path) -> Broken:
    t = compliant(p, protocol_overrides={"writerFeatures": ["icebergCompatV2", "icebergWriterCompatV1"]})
    return t.path, [Location("protocol", "writerFeatures")]


def break_feature_v1(p: Path) -> Broken:
    return compliant(p).path, [Location("protocol", "writerFeatures")]  # lists icebergCompatV2, not V1


def break_property_v1(p: Path) -> Broken:
    return compliant(p).path, [Location("property", "delta.enableIcebergCompatV1")]


def break_feature_v2(p: Path) -> Broken:
    t = compliant(p, protocol_overrides={"writerFeatures": ["columnMapping", "icebergWriterCompatV1"]})
    return t.path, [Location("protocol", "writerFeatures")]


def break_property_v2(p: Path) -> Broken:
    t = compliant(p, extra_properties={"delta.enableIcebergCompatV2": "false"})
    return t.path, [Location("property", "delta.enableIcebergCompatV2")]


def break_feature_wv1(p: Path) -> Broken:
    t = compliant(p, protocol_overrides={"writerFeatures": ["columnMapping", "icebergCompatV2"]})
    return t.path, [Location("protocol", "writerFeatures")]


def break_property_wv1(p: Path) -> Broken:
    t = compliant(p, extra_properties={"delta.enableIcebergWriterCompatV1": None})
    return t.path, [Location("property", "delta.enableIcebergWriterCompatV1")]


# schema ------------------------------------------------------------------------------------------------


def break_mode(p: Path) -> Broken:
    return peer_table(p, None), [Location("property", "delta.columnMapping.mode")]


def break_id_mode(p: Path) -> Broken:
    return peer_table(p, "name"), [Location("property", "delta.columnMapping.mode")]


def break_field_id(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "info.x", lambda f: f["metadata"].pop("delta.columnMapping.id"))
    return t.path, [Location("column", "info.x")]


def break_physical_name(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "name", lambda f: f["metadata"].pop("delta.columnMapping.physicalName"))
    return t.path, [Location("column", "name")]


def break_physical_name_format(p: Path) -> Broken:
    return peer_table(p, "id"), [Location("column", "a"), Location("column", "l")]  # col-<uuid> names


def break_unique_ids(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "info.x", lambda f: f["metadata"].update({"delta.columnMapping.id": 2}))  # name's id
    return t.path, [Location("column", "info.x")]


def break_max_column_id(p: Path) -> Broken:
    t = compliant(p)
    t.set_properties({"delta.columnMapping.maxColumnId": "5"})  # ids go up to 11
    return t.path, [Location("property", "delta.columnMapping.maxColumnId")]


def break_nested_present(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "tags", lambda f: f["metadata"].pop(NESTED_IDS))
    return t.path, [Location("column", "tags.element")]


def break_nested_unique(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "props", lambda f: f["metadata"][NESTED_IDS].update({"col-4.value": 1}))  # id's column id
    return t.path, [Location("column", "props.value")]


def break_v2_allowlist(p: Path) -> Broken:
    t = create_compliant_table(p, [("id", "long"), ("nothing", "void")])  # no data: void has no parquet type
    return t.path, [Location("column", "nothing")]


def break_byte_short(p: Path) -> Broken:
    t = create_compliant_table(p, [("id", "long"), ("tiny", "byte"), ("small", "short")])
    add_files(t, {"id": [1, 2], "tiny": [1, -1], "small": [300, -300]})
    return t.path, [Location("column", "tiny"), Location("column", "small")]


def break_v1_types(p: Path) -> Broken:
    t = create_compliant_table(p, FIELDS, extra_properties=V1_PROPERTIES, protocol_overrides=V1_PROTOCOL)
    add_files(t, {k: v for k, v in rows().items() if k != "part"})
    return t.path, [Location("column", "tags"), Location("column", "props")]


# features ----------------------------------------------------------------------------------------------


def break_v1_inactive(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features("icebergCompatV1"),
                  extra_properties={"delta.enableIcebergCompatV1": "true"})
    return t.path, [Location("property", "delta.enableIcebergCompatV1")]


def keep_v1_inactive(p: Path) -> Path:
    """icebergCompatV1 supported but not enabled: not active."""
    return compliant(p, protocol_overrides=features("icebergCompatV1")).path


def break_dv_supported(p: Path) -> Broken:
    t = compliant_v1(p, readerFeatures=["deletionVectors"], writerFeatures=["deletionVectors"])
    return t.path, [Location("feature", "deletionVectors")]


def break_dv_active(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features(reader=("deletionVectors",)),
                  extra_properties={"delta.enableDeletionVectors": "true"})
    return t.path, [Location("property", "delta.enableDeletionVectors")]


def keep_dv_active(p: Path) -> Path:
    """deletionVectors supported, delta.enableDeletionVectors=false: not active."""
    return compliant(p, protocol_overrides=features(reader=("deletionVectors",)),
                     extra_properties={"delta.enableDeletionVectors": "false"}).path


def _dv_table(p: Path) -> BuiltTable:
    t = create_compliant_table(p, FIELDS, protocol_overrides=features(reader=("deletionVectors",)))
    data = {k: v for k, v in rows(32).items() if k != "part"}
    add_files(t, data, deletion_vector=INLINE_DV)  # deletes rows 3, 4, 7, 11, 18 and 29 of 32
    return t


def break_dv_files(p: Path) -> Broken:
    return _dv_table(p).path, [Location("table", "files")]


def break_invariants(p: Path) -> Broken:
    t = compliant(p)
    edit_field(t, "id", lambda f: f["metadata"].update(
        {"delta.invariants": json.dumps({"expression": {"expression": "id >= 0"}})}))
    return t.path, [Location("column", "id")]


def break_cdf(p: Path) -> Broken:
    t = compliant(p, extra_properties={"delta.enableChangeDataFeed": "true"})
    return t.path, [Location("property", "delta.enableChangeDataFeed")]


def keep_cdf(p: Path) -> Path:
    """changeDataFeed supported (a legacy feature) but delta.enableChangeDataFeed=false."""
    return compliant(p, protocol_overrides=features("changeDataFeed"),
                     extra_properties={"delta.enableChangeDataFeed": "false"}).path


def break_constraints(p: Path) -> Broken:
    path = peer_table(p, "name")
    PeerTable(str(path)).alter.add_constraint({"a_positive": "a > 0"})  # deltalake's ALTER TABLE ADD CONSTRAINT
    return path, [Location("property", "delta.constraints.a_positive")]


def break_identity(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features("identityColumns"))
    edit_field(t, "id", lambda f: f["metadata"].update({
        "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}))
    return t.path, [Location("column", "id")]


def break_generated(p: Path) -> Broken:
    schema = Schema([
        Field("a", PrimitiveType("long"), nullable=True),
        Field("doubled", PrimitiveType("long"), nullable=True, metadata={"delta.generationExpression": "a * 2"}),
    ])
    PeerTable.create(str(p), schema=schema)
    write_deltalake(str(p), pa.table({"a": pa.array([1, 2], pa.int64())}), mode="append")  # computes doubled
    return p, [Location("column", "doubled")]


def break_default_columns(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features("allowColumnDefaults"))
    return t.path, [Location("feature", "allowColumnDefaults")]


def break_row_tracking(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features("domainMetadata", "rowTracking"))
    return t.path, [Location("feature", "rowTracking")]


def break_collations(p: Path) -> Broken:
    # Listed as a writer feature only: as a reader feature the table cannot be read at all (see
    # test_collations_as_reader_feature below).
    t = compliant(p, protocol_overrides=features("collations"))
    edit_field(t, "name", lambda f: f["metadata"].update({"__COLLATIONS": {"name": "ICU.en_US"}}))
    return t.path, [Location("feature", "collations"), Location("column", "name")]


def break_variant(p: Path) -> Broken:
    t = create_compliant_table(p, [("id", "long"), ("v", "variant")],
                               protocol_overrides=features(reader=("variantType",)))
    return t.path, [Location("feature", "variantType"), Location("column", "v")]


def break_allowlist(p: Path) -> Broken:
    t = compliant(p, protocol_overrides=features(reader=("typeWidening-preview",)))
    return t.path, [Location("feature", "typeWidening-preview")]


def keep_allowlist(p: Path) -> Path:
    """Every allowlisted feature, and the legacy ones that may be supported while inactive."""
    allowed = ("appendOnly", "domainMetadata", "inCommitTimestamp", "clustering", "invariants",
               "checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns")
    overrides = features(*allowed, reader=("v2Checkpoint", "vacuumProtocolCheck", "typeWidening", "timestampNtz"))
    return compliant(p, protocol_overrides=overrides).path


# data --------------------------------------------------------------------------------------------------


def _partitioned(p: Path) -> BuiltTable:
    return create_compliant_table(p, PARTITIONED_FIELDS, partition_by=["part"])


def break_num_records(p: Path) -> Broken:
    t = _partitioned(p)
    adds = add_files(t, rows(), stats="without-num-records")
    return t.path, _file_locations(adds[:1])  # the rule names the first such file


def break_materialized(p: Path) -> Broken:
    t = _partitioned(p)
    adds = add_files(t, rows(), materialize_partitions=False)
    return t.path, _file_locations(adds)


def break_int96(p: Path) -> Broken:
    t = _partitioned(p)
    adds = add_files(t, rows(), int96_timestamps=True)
    return t.path, _file_locations(adds)


def break_millis(p: Path) -> Broken:
    t = _partitioned(p)
    adds = add_files(t, rows(), coerce_timestamps="ms")
    return t.path, _file_locations(adds)


def break_field_ids(p: Path) -> Broken:
    t = _partitioned(p)
    adds = add_files(t, rows(), field_ids=False)
    return t.path, _file_locations(adds)


# paths -------------------------------------------------------------------------------------------------


def break_files_outside(p: Path) -> Broken:
    """A shallow-clone-like add: the file of the table's first add, moved out of the table, logged absolute."""
    t = _partitioned(p)
    [first, *_] = add_files(t, rows(), commit=False)
    elsewhere = p.parent / "clone-source" / "first.parquet"
    elsewhere.parent.mkdir(parents=True)
    (p / first["path"]).rename(elsewhere)
    t.commit([{"add": {**first, "path": elsewhere.as_uri()}}])
    return t.path, [Location("file", elsewhere.as_uri())]


def break_stats(p: Path) -> Broken:
    """One file's maxValues of ``id`` one below the file's largest id (stats that do not cover the data)."""
    t = _partitioned(p)
    adds = add_files(t, rows(), commit=False)
    stats = json.loads(adds[0]["stats"])
    stats["maxValues"][t.physical("id")] -= 1
    adds[0]["stats"] = json.dumps(stats)
    t.commit([{"add": a} for a in adds], "WRITE")
    return t.path, _file_locations(adds[:1])


def break_file_types(p: Path) -> Broken:
    """The schema says string for ``id`` after files were written with int64 ids (a schema that lies)."""
    t = _partitioned(p)
    adds = add_files(t, rows())
    edit_field(t, "id", lambda f: f.update(type="string"))
    return t.path, _file_locations(adds)


# IcebergCompatV3 / IcebergWriterCompatV3 ---------------------------------------------------------------


def keep_v3(p: Path) -> Path:
    return compliant_v3(p).path


def break_feature_v3(p: Path) -> Broken:
    return compliant(p).path, [Location("protocol", "writerFeatures")]  # an IcebergCompatV2 table


def break_property_v3(p: Path) -> Broken:
    t = compliant_v3(p, properties={"delta.enableIcebergCompatV3": "false"})
    return t.path, [Location("property", "delta.enableIcebergCompatV3")]


def break_feature_wv3(p: Path) -> Broken:
    protocol = {**V3_PROTOCOL, "writerFeatures": [f for f in V3_PROTOCOL["writerFeatures"]
                                                  if f != "icebergWriterCompatV3"]}
    return compliant_v3(p, protocol=protocol).path, [Location("protocol", "writerFeatures")]


def break_property_wv3(p: Path) -> Broken:
    t = compliant_v3(p, properties={"delta.enableIcebergWriterCompatV3": None})
    return t.path, [Location("property", "delta.enableIcebergWriterCompatV3")]


def break_row_tracking_enabled(p: Path) -> Broken:
    t = compliant_v3(p, properties={"delta.enableRowTracking": "false"})
    return t.path, [Location("property", "delta.enableRowTracking")]


def break_v2_inactive(p: Path) -> Broken:
    t = compliant_v3(p, properties={"delta.enableIcebergCompatV2": "true"},
                     protocol=v3_features("icebergCompatV2"))
    return t.path, [Location("property", "delta.enableIcebergCompatV2")]


def keep_v2_inactive(p: Path) -> Path:
    """icebergCompatV2 supported (Kernel allows it) but not enabled."""
    return compliant_v3(p, protocol=v3_features("icebergCompatV2"),
                        properties={"delta.enableIcebergCompatV2": "false"}).path


def break_v3_allowlist(p: Path) -> Broken:
    t = compliant_v3(p, [("id", "long"), ("nothing", "void")], partition_by=(), data=False)
    return t.path, [Location("column", "nothing")]


def keep_v3_allowlist(p: Path) -> Path:
    """variant and the geospatial types are IcebergCompatV3 types."""
    fields = [("id", "long"), ("v", "variant"), ("shape", "geometry(OGC:CRS84)"), ("place", "geography(OGC:CRS84)")]
    return compliant_v3(p, fields, partition_by=(), data=False,
                        protocol=v3_features(reader=("variantType", "geospatial"))).path


def _widened(p: Path, source: str, target: str) -> BuiltTable:
    t = compliant_v3(p, [("id", "long"), ("w", target)], partition_by=(), data=False,
                     protocol=v3_features(reader=("typeWidening",)))
    edit_field(t, "w", lambda f: f["metadata"].update(
        {"delta.typeChanges": [{"fromType": source, "toType": target}]}))
    return t


def break_widening(p: Path) -> Broken:
    return _widened(p, "integer", "double").path, [Location("column", "w")]  # Delta allows int -> double


def keep_widening(p: Path) -> Path:
    return _widened(p, "decimal(10,2)", "decimal(12,2)").path


def break_partition_types(p: Path) -> Broken:
    t = compliant_v3(p, [("id", "long"), ("v", "variant")], partition_by=("v",), data=False,
                     protocol=v3_features(reader=("variantType",)))
    return t.path, [Location("column", "v")]


def _with_default(p: Path, default: str) -> BuiltTable:
    t = compliant_v3(p, protocol=v3_features("allowColumnDefaults"))
    edit_field(t, "name", lambda f: f["metadata"].update({"CURRENT_DEFAULT": default}))
    return t


def break_defaults(p: Path) -> Broken:
    return _with_default(p, "current_user()").path, [Location("column", "name")]


def keep_defaults(p: Path) -> Path:
    return _with_default(p, "'unknown'").path


def break_v3_feature_allowlist(p: Path) -> Broken:
    t = compliant_v3(p, protocol=v3_features(reader=("collations",)))
    return t.path, [Location("feature", "collations")]


def keep_v3_feature_allowlist(p: Path) -> Path:
    """Every feature Kernel's IcebergWriterCompatV3 allows (the legacy ones inactive)."""
    allowed = ("appendOnly", "inCommitTimestamp", "clustering", "invariants", "checkConstraints", "changeDataFeed",
               "generatedColumns", "identityColumns", "allowColumnDefaults", "checkpointProtection",
               "icebergCompatV2", "icebergWriterCompatV1")
    reader = ("v2Checkpoint", "vacuumProtocolCheck", "typeWidening", "timestampNtz", "variantType",
              "variantShredding-preview", "geospatial")
    return compliant_v3(p, protocol=v3_features(*allowed, reader=reader)).path


ROW_ID_COLUMN = "_row-id-col-1"


def _row_id_table(p: Path, field_id: bytes) -> tuple[BuiltTable, str]:
    """A V3 table with one file holding a materialized row id column (as Delta on Spark writes after UPDATE)."""
    import os

    import pyarrow.parquet as pq

    t = compliant_v3(p, [("id", "long")], partition_by=(), data=False,
                     properties={"delta.rowTracking.materializedRowIdColumnName": ROW_ID_COLUMN})
    data = pa.table([pa.array([1, 2], pa.int64()), pa.array([0, 1], pa.int64())],
                    schema=pa.schema([pa.field("col-1", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                                      pa.field(ROW_ID_COLUMN, pa.int64(), metadata={b"PARQUET:field_id": field_id})]))
    pq.write_table(data, t.path / "f.parquet")
    stats = {"numRecords": 2, "minValues": {"col-1": 1}, "maxValues": {"col-1": 2}, "nullCount": {"col-1": 0}}
    t.commit([{"add": {"path": "f.parquet", "partitionValues": {}, "size": os.path.getsize(t.path / "f.parquet"),
                       "modificationTime": 1, "dataChange": True, "stats": json.dumps(stats), "baseRowId": 0}}])
    return t, "f.parquet"


def break_row_tracking_field_ids(p: Path) -> Broken:
    t, path = _row_id_table(p, b"7")
    return t.path, [Location("file", path)]


def keep_row_tracking_field_ids(p: Path) -> Path:
    return _row_id_table(p, b"2147483540")[0].path


def keep(p: Path) -> Path:
    return compliant(p).path


def keep_v1(p: Path) -> Path:
    return compliant_v1(p).path


CASES: dict[str, Case] = {
    "protocol.reader-version": Case(V2, break_reader_version, lambda p: peer_table(p, "name")),  # reader 2
    "protocol.writer-version": Case(V2, break_writer_version, keep),
    "protocol.feature.column-mapping": Case(V2, break_cm_feature, keep),
    "protocol.feature.compat-v1": Case(V1, break_feature_v1, keep_v1),
    "property.enable-compat-v1": Case(V1, break_property_v1, keep_v1),
    "protocol.feature.compat-v2": Case(V2, break_feature_v2, keep),
    "property.enable-compat-v2": Case(V2, break_property_v2, keep),
    "protocol.feature.writer-compat-v1": Case(WV1, break_feature_wv1, keep),
    "property.enable-writer-compat-v1": Case(WV1, break_property_wv1, keep),
    "column-mapping.mode": Case(V2, break_mode, lambda p: peer_table(p, "name")),
    "column-mapping.id-mode": Case(WV1, break_id_mode, lambda p: peer_table(p, "id")),
    "column-mapping.field-id": Case(V2, break_field_id, keep),
    "column-mapping.physical-name": Case(V2, break_physical_name, keep),
    "column-mapping.physical-name-format": Case(WV1, break_physical_name_format, keep),
    "column-mapping.unique-ids": Case(V2, break_unique_ids, keep),
    "column-mapping.max-column-id": Case(V2, break_max_column_id, keep),
    "nested-ids.present": Case(V2, break_nested_present, keep),
    "nested-ids.unique": Case(V2, break_nested_unique, keep),
    "types.compat-v2-allowlist": Case(V2, break_v2_allowlist, keep),
    "types.no-byte-short": Case(WV1, break_byte_short, keep),
    "types.compat-v1-no-map-array-void": Case(V1, break_v1_types, keep_v1),
    "compat.v1-inactive": Case(V2, break_v1_inactive, keep_v1_inactive),
    "deletion-vectors.not-supported": Case(V1, break_dv_supported, keep_v1),
    "deletion-vectors.not-active": Case(V2, break_dv_active, keep_dv_active),
    "deletion-vectors.no-live-files": Case(V2, break_dv_files, keep),
    "disallowed.invariants": Case(WV1, break_invariants, keep),
    "disallowed.change-data-feed": Case(WV1, break_cdf, keep_cdf),
    "disallowed.check-constraints": Case(WV1, break_constraints, keep),
    "disallowed.identity-columns": Case(WV1, break_identity, keep),
    "disallowed.generated-columns": Case(WV1, break_generated, keep),
    "disallowed.default-columns": Case(WV1, break_default_columns, keep),
    "disallowed.row-tracking": Case(WV1, break_row_tracking, keep),
    "disallowed.collations": Case(WV1, break_collations, keep),
    "disallowed.variant": Case(WV1, break_variant, keep),
    "features.allowlist": Case(WV1, break_allowlist, keep_allowlist),
    "protocol.feature.compat-v3": Case(V3, break_feature_v3, keep_v3),
    "property.enable-compat-v3": Case(V3, break_property_v3, keep_v3),
    "protocol.feature.writer-compat-v3": Case(WV3, break_feature_wv3, keep_v3),
    "property.enable-writer-compat-v3": Case(WV3, break_property_wv3, keep_v3),
    "row-tracking.enabled": Case(V3, break_row_tracking_enabled, keep_v3),
    "compat.v2-inactive": Case(V3, break_v2_inactive, keep_v2_inactive),
    "types.compat-v3-allowlist": Case(V3, break_v3_allowlist, keep_v3_allowlist),
    "types.widening-allowlist": Case(V3, break_widening, keep_widening),
    "partitions.primitive-types": Case(V3, break_partition_types, keep_v3),
    "defaults.literal": Case(V3, break_defaults, keep_defaults),
    "features.v3-allowlist": Case(WV3, break_v3_feature_allowlist, keep_v3_feature_allowlist),
    "data.row-tracking-field-ids": Case(V3, break_row_tracking_field_ids, keep_row_tracking_field_ids,
                                        data_checks=True),
    "paths.files-outside-table": Case(V2, break_files_outside, keep),
    "data.num-records": Case(V2, break_num_records, keep, data_checks=True),
    "data.partition-values-materialized": Case(V2, break_materialized, keep, data_checks=True),
    "data.timestamp-int64": Case(V2, break_int96, keep, data_checks=True),
    "data.timestamp-micros": Case(V2, break_millis, keep, data_checks=True),
    "data.parquet-field-ids": Case(V2, break_field_ids, keep, data_checks=True),
    "data.stats-cover-data": Case(V2, break_stats, keep, data_checks=True),
    "data.file-types-match-schema": Case(V2, break_file_types, keep, data_checks=True),
}

RULE_IDS = sorted(RULES_BY_ID)


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(RULES_BY_ID), (
        f"rules without a case: {sorted(set(RULES_BY_ID) - set(CASES))}; "
        f"cases without a rule: {sorted(set(CASES) - set(RULES_BY_ID))}"
    )


def _case(rule_id: str) -> Case:
    if rule_id not in CASES:
        pytest.fail(f"rule {rule_id} has no case in CASES: add a table that breaks it and one that keeps it")
    case = CASES[rule_id]
    assert case.level in RULES_BY_ID[rule_id].levels, f"{rule_id} is not a rule of {case.level}"
    assert case.data_checks == RULES_BY_ID[rule_id].data
    return case


def _report(path: Path, case: Case) -> ComplianceReport:
    return validate(str(path), case.level, data_checks=case.data_checks)


# Rules whose breaking table the Delta reader refuses on load already (CorruptLogError: validate exits 2 and names
# the columns), as deltalake's kernel does: column ids shared by two columns (tests/core/delta/test_metadata_rules.py).
REFUSED_ON_LOAD = {"column-mapping.unique-ids"}


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_fails_on_a_table_that_breaks_it(rule_id: str, tmp_path: Path) -> None:
    case = _case(rule_id)
    path, locations = case.breaks(tmp_path / "broken")
    if rule_id in REFUSED_ON_LOAD:
        # The breaking commit gives info.x the id of another column: a shared id, and a changed one.
        refused = "same column mapping id|changes the column mapping id of column 'info.x'"
        with pytest.raises(CorruptLogError, match=refused):
            _report(path, case)
        return
    report = _report(path, case)
    assert rule_id in {v.rule_id for v in report.violations}  # failed_rule_ids has the errors, not the warnings
    assert rule_id in report.rules_checked
    found = {v.location for v in report.violations if v.rule_id == rule_id}
    assert set(locations) <= found, f"{rule_id}: expected {locations}, got {found}"
    rule = RULES_BY_ID[rule_id]
    for v in report.violations:
        if v.rule_id == rule_id:
            assert (v.title, v.hint, v.spec, v.severity) == (rule.title, rule.hint, rule.spec, rule.severity)
            assert v.message
            assert set(v.levels) == {lv.value for lv in rule.levels}


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_holds_on_a_table_that_keeps_it(rule_id: str, tmp_path: Path) -> None:
    case = _case(rule_id)
    report = _report(case.keeps(tmp_path / "kept"), case)
    assert rule_id in report.rules_checked
    assert rule_id not in {v.rule_id for v in report.violations}


# -- the compliant table ----------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [V2, WV1])
def test_compliant_table_passes_every_rule_of_its_levels(level: str, tmp_path: Path) -> None:
    table = compliant(tmp_path / "t")
    report = validate(table.location, level, data_checks=True)
    assert report.violations == ()
    assert report.compliant
    assert report.files_sampled == 2
    expected_levels = {V2, WV1} if level == WV1 else {V2}
    assert set(report.rules_checked) == {r.id for r in RULES if {lv.value for lv in r.levels} & expected_levels}


@pytest.mark.parametrize("level", [V3, WV3])
def test_compliant_v3_table_passes_every_rule_of_its_levels(level: str, tmp_path: Path) -> None:
    table = compliant_v3(tmp_path / "t")
    report = validate(table.location, level, data_checks=True)
    assert report.violations == ()
    assert report.files_sampled == 2
    expected_levels = {V3, WV3} if level == WV3 else {V3}
    assert set(report.rules_checked) == {r.id for r in RULES if {lv.value for lv in r.levels} & expected_levels}


def test_v3_levels_have_rules(tmp_path: Path) -> None:
    """Regression: compat-v3 and writer-compat-v3 had no rules, so every table passed them."""
    table = compliant(tmp_path / "t")  # IcebergCompatV2 + IcebergWriterCompatV1
    assert _failed(table.path, V3) == {"protocol.feature.compat-v3", "property.enable-compat-v3",
                                        "row-tracking.enabled", "compat.v2-inactive"}
    assert _failed(table.path, WV3) == {"protocol.feature.compat-v3", "property.enable-compat-v3",
                                         "row-tracking.enabled", "compat.v2-inactive",
                                         "protocol.feature.writer-compat-v3", "property.enable-writer-compat-v3"}


def test_v3_table_with_deletion_vectors_is_compliant(tmp_path: Path) -> None:
    """IcebergCompatV3 allows deletion vectors (RFC note): live files with one pass, unlike at compat-v2."""
    t = create_compliant_table(tmp_path / "t", FIELDS, extra_properties=V3_PROPERTIES, protocol_overrides=V3_PROTOCOL)
    add_files(t, {k: v for k, v in rows(32).items() if k != "part"}, deletion_vector=INLINE_DV)
    assert _failed(t.path, WV3, data_checks=True) == set()


def test_v3_writer_rules_are_the_v1_writer_rules(tmp_path: Path) -> None:
    """byte/short, name mode and the legacy features fail writer-compat-v3 as they fail writer-compat-v1."""
    t = compliant_v3(tmp_path / "t", [("id", "long"), ("tiny", "byte")], partition_by=(), data=False,
                     properties={"delta.enableChangeDataFeed": "true"})
    assert _failed(t.path, WV3) == {"types.no-byte-short", "disallowed.change-data-feed"}
    assert _failed(t.path, V3) == set()


@pytest.mark.parametrize(("source", "target", "allowed"), [
    ("byte", "long", True), ("short", "integer", True), ("integer", "long", True), ("float", "double", True),
    ("decimal(5,2)", "decimal(7,2)", True), ("decimal(5,2)", "decimal(7,3)", False), ("integer", "double", False),
    ("long", "decimal(20,0)", False), ("date", "timestamp_ntz", False),
])
def test_type_widening_allowlist(source: str, target: str, allowed: bool, tmp_path: Path) -> None:
    t = _widened(tmp_path / "t", source, target)
    assert ("types.widening-allowlist" not in _failed(t.path, V3)) is allowed


@pytest.mark.parametrize(("default", "literal"), [
    ("'x'", True), ("42", True), ("-1.5", True), ("NULL", True), ("true", True), ("DATE'2024-01-01'", True),
    ("TIMESTAMP '2024-01-01 00:00:00'", True), ("1 + 1", False), ("current_date()", False), ("'a' || 'b'", False),
])
def test_literal_defaults(default: str, literal: bool, tmp_path: Path) -> None:
    t = _with_default(tmp_path / "t", default)
    assert ("defaults.literal" not in _failed(t.path, V3)) is literal


def test_compliant_v1_table_passes_compat_v1(tmp_path: Path) -> None:
    table = compliant_v1(tmp_path / "t")
    report = validate(table.location, V1, data_checks=True)
    assert report.violations == ()
    # IcebergCompatV1 on, IcebergCompatV2 off: not a V2 table.
    assert validate(table.location, V2).failed_rule_ids == {
        "protocol.feature.compat-v2", "property.enable-compat-v2", "compat.v1-inactive"}


def test_compliant_table_is_not_a_v1_table(tmp_path: Path) -> None:
    table = compliant(tmp_path / "t")
    assert validate(table.location, V1, data_checks=True).failed_rule_ids == {
        "protocol.feature.compat-v1", "property.enable-compat-v1", "types.compat-v1-no-map-array-void"}


def test_compliant_table_reads_back_through_deltalake(tmp_path: Path) -> None:
    """The helper's tables are real Delta tables: delta-rs resolves the columns by id and reads the rows back,
    and sees the stats the helper wrote."""
    from deltalake import QueryBuilder

    table = compliant(tmp_path / "t")
    peer = PeerTable(table.location)
    assert peer.protocol().writer_features == ["columnMapping", "icebergCompatV2", "icebergWriterCompatV1"]
    got = pa.table(QueryBuilder().register("t", peer).execute("select * from t order by id").read_all()).to_pylist()
    data = rows()
    expected = [{k: data[k][i] for k in data} for i in range(4)]
    for e in expected:
        e["props"] = list(e["props"].items())
    assert got == expected
    actions = pa.table(peer.get_add_actions(flatten=True)).to_pylist()
    assert sorted(a["num_records"] for a in actions) == [2, 2]


def test_compliant_table_has_ids_everywhere(tmp_path: Path) -> None:
    table = compliant(tmp_path / "t")
    schema = table.schema()
    assert table.properties["delta.columnMapping.maxColumnId"] == "11"
    assert [f["metadata"]["delta.columnMapping.id"] for f in schema["fields"]] == [1, 2, 3, 4, 5, 8]
    assert table.field("tags")["metadata"][NESTED_IDS] == {"col-3.element": 9}
    assert table.field("props")["metadata"][NESTED_IDS] == {"col-4.key": 10, "col-4.value": 11}
    import pyarrow.parquet as pq

    one = next(table.path.rglob("*.parquet"))
    arrow = pq.read_schema(one)
    assert arrow.names == ["col-1", "col-2", "col-3", "col-4", "col-5", "col-8"]  # partition column last
    assert arrow.field("col-3").type.value_field.metadata == {b"PARQUET:field_id": b"9"}
    assert arrow.field("col-4").type.item_field.metadata == {b"PARQUET:field_id": b"11"}
    assert arrow.field("col-5").type.field("col-7").metadata == {b"PARQUET:field_id": b"7"}
    leaves = pq.ParquetFile(one).schema
    when = next(leaves.column(i) for i in range(len(leaves)) if leaves.column(i).path == "col-5.col-7")
    assert when.physical_type == "INT64"


# -- variants of some rules ------------------------------------------------------------------------------


def _failed(path: Path | str, level: str, **kwargs) -> set[str]:
    return validate(str(path), level, **kwargs).failed_rule_ids


def _locations(path: Path | str, level: str, rule_id: str, **kwargs) -> set[Location]:
    return {v.location for v in validate(str(path), level, **kwargs).violations if v.rule_id == rule_id}


def test_reader_version_3_needs_column_mapping_in_reader_features(tmp_path: Path) -> None:
    t = compliant(tmp_path / "t", protocol_overrides={"readerFeatures": []})
    assert "protocol.reader-version" in _failed(t.path, WV1)
    plain = peer_table(tmp_path / "plain", None)  # deltalake default: 1/2
    assert "protocol.reader-version" in _failed(plain, V2)


def test_max_column_id_missing(tmp_path: Path) -> None:
    t = compliant(tmp_path / "t", extra_properties={"delta.columnMapping.maxColumnId": None})
    assert _locations(t.path, V2, "column-mapping.max-column-id") == {
        Location("property", "delta.columnMapping.maxColumnId")}


def test_max_column_id_must_cover_nested_ids(tmp_path: Path) -> None:
    t = compliant(tmp_path / "t", extra_properties={"delta.columnMapping.maxColumnId": "8"})  # column ids <= 8
    assert "column-mapping.max-column-id" in _failed(t.path, V2)


def test_nested_ids_missing_in_a_deltalake_id_mode_table(tmp_path: Path) -> None:
    """deltalake writes no nested ids for array elements."""
    path = peer_table(tmp_path / "t", "id")
    assert _locations(path, V2, "nested-ids.present") == {Location("column", "l.element")}


def test_nested_ids_of_nested_slots_and_structs_in_arrays(tmp_path: Path) -> None:
    t = create_compliant_table(tmp_path / "t", [("m", map_("string", array(struct(("z", array("long"))))))])
    assert "nested-ids.present" not in _failed(t.path, V2)
    edit_field(t, "m", lambda f: f["metadata"][NESTED_IDS].pop("col-1.value.element"))
    assert _locations(t.path, V2, "nested-ids.present") == {Location("column", "m.value.element")}


def test_nested_ids_keyed_by_logical_name_are_accepted(tmp_path: Path) -> None:
    """The protocol text keys nested ids by the field name under parquet.field.nested.ids."""
    t = compliant(tmp_path / "t")
    edit_field(t, "tags", lambda f: f["metadata"].update(
        {"parquet.field.nested.ids": {"tags.element": f["metadata"].pop(NESTED_IDS)["col-3.element"]}}))
    assert _failed(t.path, WV1, data_checks=True) == set()


def test_nested_ids_duplicated_between_slots(tmp_path: Path) -> None:
    t = compliant(tmp_path / "t")
    edit_field(t, "props", lambda f: f["metadata"][NESTED_IDS].update({"col-4.key": 9}))  # tags.element's id
    assert _locations(t.path, V2, "nested-ids.unique") == {Location("column", "props.key")}


def test_byte_and_short_are_fine_for_compat_v2(tmp_path: Path) -> None:
    path, _ = break_byte_short(tmp_path / "t")
    assert _failed(path, V2, data_checks=True) == set()


def test_void_column_blocked_by_compat_v1(tmp_path: Path) -> None:
    t = create_compliant_table(tmp_path / "t", [("id", "long"), ("nothing", "void")],
                               extra_properties=V1_PROPERTIES, protocol_overrides=V1_PROTOCOL)
    assert _locations(t.path, V1, "types.compat-v1-no-map-array-void") == {Location("column", "nothing")}


def test_the_deletion_vector_is_real(tmp_path: Path) -> None:
    """delta-rs applies the helper's inline deletion vector: rows 3, 4, 7, 11, 18 and 29 are gone."""
    from deltalake import QueryBuilder

    table = _dv_table(tmp_path / "t")
    peer = PeerTable(table.location)
    ids = pa.table(QueryBuilder().register("t", peer).execute("select id from t").read_all()).column("id")
    assert set(range(32)) - set(ids.to_pylist()) == {3, 4, 7, 11, 18, 29}
    assert table.delta().snapshot().num_records == 26


def test_dv_rules_look_only_at_live_files(tmp_path: Path) -> None:
    """A file whose deletion vector was purged (removed, rewritten without one) no longer counts."""
    table = _dv_table(tmp_path / "t")
    assert "deletion-vectors.no-live-files" in _failed(table.path, V2)
    live = table.delta().snapshot().files.column("path").to_pylist()
    removes = [{"remove": {"path": p, "deletionTimestamp": 1, "dataChange": True, "deletionVector": INLINE_DV}}
               for p in live]
    table.commit(removes, "DELETE")
    add_files(table, {k: v for k, v in rows(4).items() if k != "part"})
    assert "deletion-vectors.no-live-files" not in _failed(table.path, V2)


def test_no_num_records_when_stats_are_absent(tmp_path: Path) -> None:
    t = _partitioned(tmp_path / "t")
    add_files(t, rows(), stats="none")
    found = _locations(t.path, V2, "data.num-records", data_checks=True)
    assert len(found) == 1 and next(iter(found)).kind == "file"


def test_deltalake_does_not_materialize_partition_values(tmp_path: Path) -> None:
    path = peer_table(tmp_path / "t", "name", partition_by=["p"])
    files = {Location("file", p) for p in pa.table(PeerTable(str(path)).get_add_actions()).column("path").to_pylist()}
    assert _locations(path, V2, "data.partition-values-materialized", data_checks=True) == files


def test_wrong_nested_parquet_field_id(tmp_path: Path) -> None:
    t = _partitioned(tmp_path / "t")
    adds = add_files(t, rows(), field_id_overrides={"col-3.element": 99})
    report = validate(t.location, V2, data_checks=True)
    found = [v for v in report.violations if v.rule_id == "data.parquet-field-ids"]
    assert {v.location for v in found} == set(_file_locations(adds))
    assert all("col-3.element: parquet field id 99 but the Delta id is 9" in v.message for v in found)


def test_wrong_struct_child_parquet_field_id(tmp_path: Path) -> None:
    t = _partitioned(tmp_path / "t")
    add_files(t, rows(), field_id_overrides={"col-7": None})
    report = validate(t.location, WV1, data_checks=True)
    assert report.failed_rule_ids == {"data.parquet-field-ids"}
    assert all("col-5.col-7: parquet field id None but the Delta id is 7" in v.message for v in report.violations)


def test_data_checks_sample_the_files(tmp_path: Path) -> None:
    """A sample of 1 file reads only one footer; the stats rule still sees every file."""
    t = _partitioned(tmp_path / "t")
    add_files(t, rows(), int96_timestamps=True, stats="without-num-records")
    report = validate(t.location, V2, data_checks=True, sample_size=1)
    assert report.files_sampled == 1
    assert len([v for v in report.violations if v.rule_id == "data.timestamp-int64"]) == 1
    assert "2 live file(s) have no numRecords" in next(
        v.message for v in report.violations if v.rule_id == "data.num-records")


def test_data_rules_are_skipped_without_data_checks(tmp_path: Path) -> None:
    t = _partitioned(tmp_path / "t")
    add_files(t, rows(), int96_timestamps=True, field_ids=False, materialize_partitions=False,
              stats="without-num-records")
    report = validate(t.location, WV1)
    assert report.compliant and report.files_sampled == 0
    assert not [r for r in report.rules_checked if r.startswith("data.")]
    assert _failed(t.path, WV1, data_checks=True) == {
        "data.num-records", "data.partition-values-materialized", "data.timestamp-int64", "data.parquet-field-ids"}


def test_validate_reads_an_older_version(tmp_path: Path) -> None:
    t = compliant(tmp_path / "t")
    t.set_properties({"delta.enableChangeDataFeed": "true"})
    assert "disallowed.change-data-feed" in _failed(t.path, WV1)
    assert validate(t.location, WV1, version=1).compliant


def test_collations_as_reader_feature(tmp_path: Path) -> None:
    """collations is a reader-writer feature; the log engine reads such tables so the rule can report it."""
    t = compliant(tmp_path / "t", protocol_overrides=features(reader=("collations",)))
    assert "disallowed.collations" in _failed(t.path, WV1)


def _commit_file(table: BuiltTable, data: pa.Table, relative: str, log_path: str | None = None) -> str:
    """Write ``data`` with pyarrow as it is (names and field ids untouched) and commit its add action."""
    import os

    import pyarrow.parquet as pq

    target = table.path / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, target)
    path = log_path or relative
    table.commit([{"add": {"path": path, "partitionValues": {}, "size": os.path.getsize(target),
                           "modificationTime": 1, "dataChange": True,
                           "stats": json.dumps({"numRecords": data.num_rows})}}])
    return path


def test_file_with_logical_names_and_no_field_ids(tmp_path: Path) -> None:
    """In id mode a file column is resolved by its field id: a file whose columns carry neither a physical
    name nor a field id cannot be read by id (regression: such files used to pass)."""
    t = create_compliant_table(tmp_path / "t", [("id", "long"), ("name", "string")])
    path = _commit_file(t, pa.table({"id": [1, 2], "name": ["a", "b"]}), "logical.parquet")
    report = validate(t.location, WV1, data_checks=True)
    assert report.failed_rule_ids == {"data.parquet-field-ids"}
    (violation,) = report.violations
    assert violation.location == Location("file", path)
    assert "id: no parquet field id" in violation.message and "name: no parquet field id" in violation.message


def test_file_with_other_names_but_the_right_field_ids(tmp_path: Path) -> None:
    """An id-mode reader resolves by id, so other column names with the right ids are fine."""
    t = create_compliant_table(tmp_path / "t", [("id", "long"), ("name", "string")])
    data = pa.table({"id": [1, 2], "name": ["a", "b"]})
    data = data.cast(pa.schema([pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                                pa.field("name", pa.string(), metadata={b"PARQUET:field_id": b"2"})]))
    _commit_file(t, data, "by-id.parquet")
    assert validate(t.location, WV1, data_checks=True).compliant


def test_change_type_column_of_cdf_data_files_needs_no_field_id(tmp_path: Path) -> None:
    """Delta on Spark writes _change_type into data files of UPDATE/MERGE with change data feed (as in the
    cdf-column-mapping-id-mode fixture); readers drop it."""
    t = create_compliant_table(tmp_path / "t", [("id", "long")])
    data = pa.table({"col-1": pa.array([1], pa.int64()), "_change_type": pa.array([None], pa.string())})
    data = data.cast(pa.schema([pa.field("col-1", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                                pa.field("_change_type", pa.string())]))
    _commit_file(t, data, "cdc-in-data.parquet")
    assert validate(t.location, V2, data_checks=True).compliant


def test_data_checks_read_absolute_uri_paths(tmp_path: Path) -> None:
    """An add path may be an absolute URI, escaped as a whole (regression: the directory was not unescaped)."""
    t = create_compliant_table(tmp_path / "table", [("id", "long")])
    adds = add_files(t, {"id": [1, 2]}, commit=False, int96_timestamps=False)
    outside = tmp_path / "data dir" / "file one.parquet"
    outside.parent.mkdir()
    (t.path / adds[0]["path"]).rename(outside)
    adds[0]["path"] = outside.as_uri()
    assert "%20" in adds[0]["path"]
    t.commit([{"add": adds[0]}])
    report = validate(t.location, WV1, data_checks=True)
    assert report.compliant and report.files_sampled == 1
