"""Creating a Delta table with IcebergWriterCompatV1 on from version 0.

Version 0 holds the protocol (reader 3 / writer 7 with columnMapping, icebergCompatV2, icebergWriterCompatV1),
and the metadata: column mapping in id mode, physical names ``col-<id>``, nested ids for array elements and map
keys/values, ``delta.columnMapping.maxColumnId``, IcebergCompatV2 and IcebergWriterCompatV1 enabled.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_deltaberg.core.compat.feature_rules import ALLOWED_FEATURES
from airflow_deltaberg.core.compat.schema_rules import MAX_COLUMN_ID, V2_PRIMITIVES
from airflow_deltaberg.core.delta.log.commit import commit_with_conflict_check
from airflow_deltaberg.core.delta.log.log_segment import list_log
from airflow_deltaberg.core.delta.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    holds_type,
    nested_slots,
    parse_schema,
    parse_type,
)
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.enable.schema import writer_compat_schema
from airflow_deltaberg.core.errors import SchemaError, TableDefinitionError

OPERATION = "CREATE TABLE"
FEATURE_PREFIX = "delta.feature."
#: Properties this function sets itself; a caller may repeat them with the same value only.
FIXED_PROPERTIES = {
    "delta.columnMapping.mode": "id",
    "delta.enableIcebergCompatV2": "true",
    "delta.enableIcebergWriterCompatV1": "true",
}
#: Properties that would make the table break IcebergWriterCompatV1 when "true".
REFUSED_TRUE = ("delta.enableChangeDataFeed", "delta.enableDeletionVectors", "delta.enableIcebergCompatV1",
                "delta.enableRowTracking", "delta.enableIcebergCompatV3")
#: Properties that switch a feature on, and the feature the protocol must then support.
FEATURE_PROPERTIES = {
    "delta.appendOnly": "appendOnly",
    # Delta on Spark names the feature inCommitTimestamp (the protocol text: inCommitTimestamps).
    "delta.enableInCommitTimestamps": "inCommitTimestamp",
    "delta.enableTypeWidening": "typeWidening",
}
READER_WRITER_FEATURES = frozenset({"columnMapping", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck",
                                    "typeWidening"})

SchemaLike = StructType | pa.Schema | Mapping[str, Any] | str


# -- schema input -----------------------------------------------------------------------------------------


def _arrow_to_delta(t: pa.DataType, where: str) -> DataType:
    if pa.types.is_struct(t):
        return StructType(tuple(StructField(f.name, _arrow_to_delta(f.type, f"{where}.{f.name}"), f.nullable)
                                for f in t))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ArrayType(_arrow_to_delta(t.value_type, f"{where}.element"), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(_arrow_to_delta(t.key_type, f"{where}.key"), _arrow_to_delta(t.item_type, f"{where}.value"),
                       t.item_field.nullable)
    if pa.types.is_decimal(t):
        return PrimitiveType(f"decimal({t.precision},{t.scale})")
    if pa.types.is_timestamp(t):
        return PrimitiveType("timestamp" if t.tz is not None else "timestamp_ntz")
    simple = {
        pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long",
        pa.float32(): "float", pa.float64(): "double", pa.string(): "string", pa.large_string(): "string",
        pa.string_view(): "string", pa.binary(): "binary", pa.large_binary(): "binary", pa.bool_(): "boolean",
        pa.date32(): "date",
    }
    if t in simple:
        return PrimitiveType(simple[t])
    raise SchemaError(f"column {where}: Arrow type {t} has no Delta type")


def to_struct_type(schema: SchemaLike) -> StructType:
    """A Delta schema from a StructType, a pyarrow schema, a Delta schema as JSON (dict) or its string."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, pa.Schema):
        return StructType(tuple(StructField(f.name, _arrow_to_delta(f.type, f.name), f.nullable) for f in schema))
    if isinstance(schema, str):
        return parse_schema(schema)
    parsed = parse_type(dict(schema))
    if not isinstance(parsed, StructType):
        raise SchemaError("the table schema must be a struct")
    return parsed


# -- checks -----------------------------------------------------------------------------------------------


def _check_schema(schema: StructType, location: str) -> None:
    problems = []
    if not schema.fields:
        problems.append("the schema has no columns")
    for path, f in schema.walk():
        for suffix, t in [("", f.type), *nested_slots(f.type)]:
            if not isinstance(t, PrimitiveType):
                continue
            where = ".".join(path) + suffix
            if t.name in ("byte", "short"):
                problems.append(f"column {where} is {t.name}: IcebergWriterCompatV1 allows no byte/short "
                                "(use integer)")
            elif not t.is_decimal and t.name not in V2_PRIMITIVES:
                problems.append(f"column {where} has type {t.name}, which IcebergCompatV2 does not allow")
        if any(k.startswith("delta.") for k in f.metadata):
            keys = sorted(k for k in f.metadata if k.startswith("delta."))
            problems.append(f"column {'.'.join(path)} carries Delta metadata {keys}: ids, physical names, "
                            "invariants, identity and generation expressions are not accepted here")
    if problems:
        raise TableDefinitionError("; ".join(problems), table=location)


def _check_partitions(schema: StructType, partition_by: Sequence[str], location: str) -> None:
    names = schema.names
    for name in partition_by:
        if name not in names:
            raise TableDefinitionError(f"partition column {name} is not in the schema", table=location)
        if not isinstance(schema.field(name).type, PrimitiveType):
            raise TableDefinitionError(f"partition column {name} must have a primitive type, not "
                                       f"{schema.field(name).type}", table=location)
    if len(set(partition_by)) != len(partition_by):
        raise TableDefinitionError(f"partition columns repeat: {list(partition_by)}", table=location)


def _properties(properties: Mapping[str, Any], location: str) -> tuple[dict[str, str], set[str]]:
    """The configuration to store and the extra features the properties ask for."""
    config: dict[str, str] = {}
    features: set[str] = set()
    for key, raw in properties.items():
        value = str(raw).lower() if isinstance(raw, bool) else str(raw)
        if key.startswith(FEATURE_PREFIX):
            # Delta's way to ask for a feature: it goes to the protocol, not into the configuration.
            name = key[len(FEATURE_PREFIX):]
            if value not in ("supported", "enabled"):
                raise TableDefinitionError(f"{key}={value!r}: only 'supported' is accepted", table=location)
            if name not in ALLOWED_FEATURES:
                raise TableDefinitionError(f"table feature {name} is not in the IcebergWriterCompatV1 allowlist",
                                           table=location)
            features.add(name)
            continue
        if key in FIXED_PROPERTIES and value != FIXED_PROPERTIES[key]:
            raise TableDefinitionError(f"{key}={value!r} contradicts IcebergWriterCompatV1 ({key} must be "
                                       f"{FIXED_PROPERTIES[key]!r})", table=location)
        if key in REFUSED_TRUE and value.lower() == "true":
            raise TableDefinitionError(f"{key}=true is not allowed with IcebergWriterCompatV1", table=location)
        if key.startswith("delta.constraints.") or key == MAX_COLUMN_ID:
            raise TableDefinitionError(f"{key} cannot be set when creating an IcebergWriterCompatV1 table",
                                       table=location)
        if key in FEATURE_PROPERTIES and value.lower() == "true":
            features.add(FEATURE_PROPERTIES[key])
        if key == "delta.checkpointPolicy" and value == "v2":
            features.add("v2Checkpoint")
        config[key] = value
    return config, features


def _protocol(schema: StructType, extra: set[str]) -> dict[str, Any]:
    features = {"columnMapping", "icebergCompatV2", "icebergWriterCompatV1", *extra}
    if holds_type(schema, "timestamp_ntz"):
        features.add("timestampNtz")
    reader = sorted(features & READER_WRITER_FEATURES)
    return {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader, "writerFeatures": sorted(features)}


# -- entry point --------------------------------------------------------------------------------------------


def create_table(
    location: str,
    schema: SchemaLike,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> int:
    """Create an empty Delta table at ``location`` with IcebergWriterCompatV1 on; returns the version (0).

    ``schema``: a StructType, a pyarrow schema, or the Delta schema JSON (dict or string), without column
    mapping metadata: ids 1, 2, ... are assigned in schema order, nested ids after them. ``properties`` are
    stored as given; ``delta.feature.<name>=supported`` adds an allowed feature to the protocol instead.
    Raises TableDefinitionError when the location already holds a Delta table or the definition breaks
    IcebergWriterCompatV1, CommitConflictError when another writer creates the table at the same time.
    """
    table = DeltaTable(location, storage_options)
    listing = list_log(table.storage)
    if listing.commits or listing.checkpoints:
        raise TableDefinitionError("the location already holds a Delta table; nothing was written",
                                   table=table.location, version=listing.latest_version)
    try:
        delta_schema = to_struct_type(schema)
    except SchemaError as exc:
        raise TableDefinitionError(f"invalid schema: {exc}", table=table.location) from exc
    _check_schema(delta_schema, table.location)
    _check_partitions(delta_schema, list(partition_by), table.location)
    config, features = _properties(properties or {}, table.location)
    target, max_id, _ = writer_compat_schema(delta_schema, keep_ids=False)
    config.update(FIXED_PROPERTIES)
    config[MAX_COLUMN_ID] = str(max_id)
    metadata: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": target.to_json_string(),
        "partitionColumns": list(partition_by),
        "configuration": config,
        "createdTime": int(time.time() * 1000),
    }
    if name is not None:
        metadata["name"] = name
    if description is not None:
        metadata["description"] = description
    actions = [{"protocol": _protocol(delta_schema, features)}, {"metaData": metadata}]
    return commit_with_conflict_check(
        table, actions, read_version=-1, operation=OPERATION, max_attempts=1,
        parameters={"partitionBy": json.dumps(list(partition_by)), "properties": json.dumps(config)},
    )
