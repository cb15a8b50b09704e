"""Rules on the schema: column mapping ids and names, nested ids, and the allowed types."""

from __future__ import annotations

from collections.abc import Iterator

from airflow_deltaberg.core.compat.model import (
    ALL_LEVELS,
    V1,
    V2,
    WV1,
    CheckContext,
    Finding,
    Rule,
    column_location,
    property_location,
)
from airflow_deltaberg.core.delta.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    nested_slots,
)

MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
V2_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "timestamp",
     "timestamp_ntz", "date"}
)
# Collated strings keep the type name "string" and carry their collation in field metadata.
COLLATIONS_KEY = "__COLLATIONS"


def _mapped(ctx: CheckContext) -> bool:
    return ctx.metadata.column_mapping_mode in ("name", "id")


def mode_name_or_id(ctx: CheckContext) -> Iterator[Finding]:
    mode = ctx.metadata.column_mapping_mode
    if mode not in ("name", "id"):
        yield Finding(f"delta.columnMapping.mode is {mode!r}; it must be 'name' or 'id'",
                      property_location("delta.columnMapping.mode"))


def mode_id(ctx: CheckContext) -> Iterator[Finding]:
    mode = ctx.metadata.column_mapping_mode
    if mode != "id":
        yield Finding(f"delta.columnMapping.mode is {mode!r}; IcebergWriterCompatV1 requires 'id'",
                      property_location("delta.columnMapping.mode"))


def field_ids(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return  # reported once by the mode rule
    for path, f in ctx.schema.walk():
        if f.column_mapping_id is None:
            yield Finding("the column has no delta.columnMapping.id", column_location(path))


def physical_names(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    for path, f in ctx.schema.walk():
        if "delta.columnMapping.physicalName" not in f.metadata:
            yield Finding("the column has no delta.columnMapping.physicalName", column_location(path))


def physical_name_is_col_id(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    for path, f in ctx.schema.walk():
        cid = f.column_mapping_id
        physical = f.metadata.get("delta.columnMapping.physicalName")
        if cid is not None and physical != f"col-{cid}":
            yield Finding(f"physical name is {physical!r}; IcebergWriterCompatV1 requires 'col-{cid}'",
                          column_location(path))


def unique_ids(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    seen: dict[int, tuple[str, ...]] = {}
    for path, f in ctx.schema.walk():
        cid = f.column_mapping_id
        if cid is None:
            continue
        if cid in seen:
            yield Finding(f"column id {cid} is also used by {'.'.join(seen[cid])}", column_location(path))
        else:
            seen[cid] = path


def _all_ids(schema: StructType) -> list[int]:
    ids = [f.column_mapping_id for _, f in schema.walk() if f.column_mapping_id is not None]
    ids += [i for _, f in schema.walk() for i in f.nested_ids.values()]
    return ids


def max_column_id(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    ids = _all_ids(ctx.schema)
    raw = ctx.config.get(MAX_COLUMN_ID)
    try:
        declared = int(raw) if raw is not None else None
    except ValueError:
        declared = None
    if declared is None:
        yield Finding(f"{MAX_COLUMN_ID} is {'missing' if raw is None else repr(raw)}",
                      property_location(MAX_COLUMN_ID))
    elif ids and max(ids) > declared:
        yield Finding(f"{MAX_COLUMN_ID} is {declared} but the schema uses id {max(ids)}",
                      property_location(MAX_COLUMN_ID))


def nested_ids_present(ctx: CheckContext) -> Iterator[Finding]:
    for path, f in ctx.schema.walk():
        for key, _ in nested_slots(f.type):
            if f.nested_id(key) is None:
                yield Finding(
                    f"no nested id for {f.name}{key} (delta.columnMapping.nested.ids / parquet.field.nested.ids)",
                    column_location((*path, key.lstrip("."))),
                )


def nested_ids_unique(ctx: CheckContext) -> Iterator[Finding]:
    column_ids = {f.column_mapping_id: p for p, f in ctx.schema.walk() if f.column_mapping_id is not None}
    seen: dict[int, str] = {}
    for path, f in ctx.schema.walk():
        for key, _ in nested_slots(f.type):
            nid = f.nested_id(key)
            if nid is None:
                continue
            where = ".".join(path) + key
            if nid in column_ids:
                yield Finding(f"nested id {nid} of {where} is also the column id of {'.'.join(column_ids[nid])}",
                              column_location((*path, key.lstrip("."))))
            elif nid in seen:
                yield Finding(f"nested id {nid} of {where} is also used by {seen[nid]}",
                              column_location((*path, key.lstrip("."))))
            else:
                seen[nid] = where


def _types(schema: StructType) -> Iterator[tuple[tuple[str, ...], DataType, StructField]]:
    """Every type in the schema with the path of its field (element/key/value slots included)."""
    for path, f in schema.walk():
        yield path, f.type, f
        for key, t in nested_slots(f.type):
            yield (*path, key.lstrip(".")), t, f


def _type_name(t: DataType) -> str:
    if isinstance(t, PrimitiveType):
        return "decimal" if t.is_decimal else t.name
    return {StructType: "struct", ArrayType: "array", MapType: "map"}[type(t)]


def v2_type_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        name = _type_name(t)
        if isinstance(t, PrimitiveType) and name not in V2_PRIMITIVES and name != "decimal":
            yield Finding(f"type {t.name} is not in the IcebergCompatV2 allow-list", column_location(path))


def no_byte_short(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        if isinstance(t, PrimitiveType) and t.name in ("byte", "short"):
            yield Finding(f"type {t.name} is not allowed by IcebergWriterCompatV1 (widen it to integer)",
                          column_location(path))


def v1_no_map_array_void(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        name = _type_name(t)
        if name in ("map", "array", "void"):
            yield Finding(f"type {name} is blocked by IcebergCompatV1", column_location(path))


_ENABLE = "deltaberg enable rewrites the table with column mapping id mode"

SCHEMA_RULES = [
    Rule("column-mapping.mode", "Column mapping in name or id mode", frozenset({V1, V2}), mode_name_or_id,
         _ENABLE, "protocol: IcebergCompatV1/V2 writer requirements"),
    Rule("column-mapping.id-mode", "Column mapping in id mode", frozenset({WV1}), mode_id,
         _ENABLE, "RFC IcebergWriterCompatV1: column mapping id mode"),
    Rule("column-mapping.field-id", "Every field has a column mapping id", ALL_LEVELS, field_ids,
         _ENABLE, "protocol: Column Mapping"),
    Rule("column-mapping.physical-name", "Every field has a physical name", ALL_LEVELS, physical_names,
         _ENABLE, "protocol: Column Mapping"),
    Rule("column-mapping.physical-name-format", "Physical names are col-<id>", frozenset({WV1}),
         physical_name_is_col_id, "deltaberg enable rewrites the data with col-<id> physical names",
         "RFC IcebergWriterCompatV1: physical name col-[column id]"),
    Rule("column-mapping.unique-ids", "Column ids are unique", ALL_LEVELS, unique_ids,
         "reassign the duplicate ids (deltaberg enable --mode rewrite)", "protocol: Column Mapping"),
    Rule("column-mapping.max-column-id", "maxColumnId covers every id", ALL_LEVELS, max_column_id,
         f"set {MAX_COLUMN_ID} to at least the largest id in use", "protocol: Column Mapping writer requirements"),
    Rule("nested-ids.present", "Array elements and map keys/values have ids", frozenset({V2, WV1}),
         nested_ids_present, "assign nested ids (deltaberg enable)",
         "protocol: IcebergCompatV2, storing identifiers for nested fields"),
    Rule("nested-ids.unique", "Nested ids are unique and distinct from column ids", frozenset({V2, WV1}),
         nested_ids_unique, "reassign the nested ids (deltaberg enable)",
         "protocol: IcebergCompatV2, storing identifiers for nested fields"),
    Rule("types.compat-v2-allowlist", "Only IcebergCompatV2 types", frozenset({V2, WV1}), v2_type_allowlist,
         "drop or cast the column to an allowed type", "protocol: IcebergCompatV2 type allow-list"),
    Rule("types.no-byte-short", "No byte or short columns", frozenset({WV1}), no_byte_short,
         "widen byte/short columns to integer (deltaberg enable rewrites them)",
         "RFC IcebergWriterCompatV1: no byte or short"),
    Rule("types.compat-v1-no-map-array-void", "No map, array or void columns", frozenset({V1}),
         v1_no_map_array_void, "drop the column or use IcebergCompatV2", "protocol: IcebergCompatV1"),
]
