"""Rules on the schema: column mapping ids and names, nested ids, and the allowed types."""

from __future__ import annotations

import re
from collections.abc import Iterator

from airflow_deltaberg.core.compat.model import (
    ALL_LEVELS,
    V1,
    V2,
    V3,
    WV1,
    WV3,
    CheckContext,
    Finding,
    Rule,
    column_location,
    property_location,
)
from airflow_deltaberg.core.delta.schema import (
    MAX_COLUMN_ID,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    nested_slots,
)
from airflow_deltaberg.core.errors import SchemaError

V2_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "timestamp",
     "timestamp_ntz", "date"}
)
# IcebergCompatV3 adds variant and the geospatial types (whose names carry a CRS: geometry(OGC:CRS84)).
V3_PRIMITIVES = V2_PRIMITIVES | {"variant", "geometry", "geography"}
# Partition columns: the primitive types Delta Kernel 4.4.0 accepts (CHECK_HAS_ALLOWED_PARTITION_TYPES).
PARTITION_PRIMITIVES = V2_PRIMITIVES
# Column defaults live in the field metadata under this key (protocol: Default Columns).
DEFAULT_KEY = "CURRENT_DEFAULT"
TYPE_CHANGES = "delta.typeChanges"


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
        yield Finding(f"delta.columnMapping.mode is {mode!r}; IcebergWriterCompatV1/V3 require 'id'",
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
        if f.metadata.get("delta.columnMapping.physicalName") is None:
            yield Finding("the column has no delta.columnMapping.physicalName", column_location(path))


def physical_name_is_col_id(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    for path, f in ctx.schema.walk():
        cid = f.column_mapping_id
        physical = f.metadata.get("delta.columnMapping.physicalName")
        if cid is not None and physical != f"col-{cid}":
            yield Finding(f"physical name is {physical!r}; IcebergWriterCompatV1/V3 require 'col-{cid}'",
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


def max_column_id(ctx: CheckContext) -> Iterator[Finding]:
    if not _mapped(ctx):
        return
    raw = ctx.config.get(MAX_COLUMN_ID)
    try:
        declared = int(raw) if raw is not None else None
    except ValueError:
        declared = None
    if declared is None:
        yield Finding(f"{MAX_COLUMN_ID} is {'missing' if raw is None else repr(raw)}",
                      property_location(MAX_COLUMN_ID))
        return
    above = ctx.metadata.column_id_above_max()  # the check convert refuses on
    if above is not None:
        yield Finding(f"{MAX_COLUMN_ID} is {above[1]} but the schema uses id {above[0]}",
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
    by_column_id = {f.column_mapping_id: p for p, f in ctx.schema.walk() if f.column_mapping_id is not None}
    seen: dict[int, str] = {}
    for path, f in ctx.schema.walk():
        for key, _ in nested_slots(f.type):
            nid = f.nested_id(key)
            if nid is None:
                continue
            where = ".".join(path) + key
            if nid in by_column_id:
                yield Finding(f"nested id {nid} of {where} is also the column id of {'.'.join(by_column_id[nid])}",
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
        if t.is_decimal:
            return "decimal"
        return t.name.split("(", 1)[0]  # geometry(OGC:CRS84) -> geometry
    return {StructType: "struct", ArrayType: "array", MapType: "map"}[type(t)]


def v2_type_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        name = _type_name(t)
        if isinstance(t, PrimitiveType) and name not in V2_PRIMITIVES and name != "decimal":
            yield Finding(f"type {t.name} is not in the IcebergCompatV2 allow-list", column_location(path))


def v3_type_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        name = _type_name(t)
        if isinstance(t, PrimitiveType) and name not in V3_PRIMITIVES and name != "decimal":
            yield Finding(f"type {t.name} is not in the IcebergCompatV3 allow-list", column_location(path))


def partition_types(ctx: CheckContext) -> Iterator[Finding]:
    names = set(ctx.schema.names)
    for column in ctx.metadata.partition_columns:
        if column not in names:
            continue  # the log engine refuses such a metaData
        t = ctx.schema.field(column).type
        name = _type_name(t)
        if not isinstance(t, PrimitiveType) or (name not in PARTITION_PRIMITIVES and name != "decimal"):
            yield Finding(f"partition column of type {t} (IcebergCompatV3 partitions by primitive types only)",
                          column_location((column,)))


# Widenings Iceberg can express (protocol: IcebergCompatV3 type widening allow-list).
_INTEGRAL = ("byte", "short", "integer", "long")


def _widening_allowed(source: str, target: str) -> bool:
    if source in _INTEGRAL and target in _INTEGRAL:
        return _INTEGRAL.index(target) > _INTEGRAL.index(source)
    if (source, target) == ("float", "double"):
        return True
    if source.startswith("decimal") and target.startswith("decimal"):
        try:
            (p1, s1), (p2, s2) = PrimitiveType(source).precision_scale, PrimitiveType(target).precision_scale
        except SchemaError:
            return False
        return s1 == s2 and p2 > p1
    return False


def type_widening_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    for path, f in ctx.schema.walk():
        changes = f.metadata.get(TYPE_CHANGES) or []
        for change in changes if isinstance(changes, list) else []:
            if not isinstance(change, dict):
                continue
            source, target = str(change.get("fromType")), str(change.get("toType"))
            if not _widening_allowed(source, target):
                slot = str(change.get("fieldPath") or "")
                where = (*path, *slot.split(".")) if slot else path
                yield Finding(f"the column was widened from {source} to {target}, which Iceberg cannot express",
                              column_location(where))


_LITERAL_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?[dDfFlLsSyY]?$")
_QUOTED = re.compile(r"""^(?:[xX])?('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")$""")
_TYPED = re.compile(r"""^(?:DATE|TIMESTAMP|TIMESTAMP_NTZ|TIMESTAMP_LTZ)\s*('[^']*'|"[^"]*")$""", re.IGNORECASE)


def _is_literal(sql: str) -> bool:
    text = sql.strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return bool(text.upper() in ("NULL", "TRUE", "FALSE") or _LITERAL_NUMBER.match(text) or _QUOTED.match(text)
                or _TYPED.match(text))


def literal_defaults(ctx: CheckContext) -> Iterator[Finding]:
    for path, f in ctx.schema.walk():
        default = f.metadata.get(DEFAULT_KEY)
        if isinstance(default, str) and not _is_literal(default):
            yield Finding(f"the default {default!r} is an expression, not a literal", column_location(path))


def no_byte_short(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        if isinstance(t, PrimitiveType) and t.name in ("byte", "short"):
            yield Finding(f"type {t.name} is not allowed by IcebergWriterCompatV1/V3 (widen it to integer)",
                          column_location(path))


def v1_no_map_array_void(ctx: CheckContext) -> Iterator[Finding]:
    for path, t, _ in _types(ctx.schema):
        name = _type_name(t)
        if name in ("map", "array", "void"):
            yield Finding(f"type {name} is blocked by IcebergCompatV1", column_location(path))


_WRITER_COMPAT = frozenset({WV1, WV3})
_ENABLE = "deltaberg enable rewrites the table with column mapping id mode"

SCHEMA_RULES = [
    Rule("column-mapping.mode", "Column mapping in name or id mode", frozenset({V1, V2, V3}), mode_name_or_id,
         _ENABLE, "protocol: IcebergCompatV1/V2 writer requirements; RFC IcebergCompatV3"),
    Rule("column-mapping.id-mode", "Column mapping in id mode", _WRITER_COMPAT, mode_id,
         _ENABLE, "RFC IcebergWriterCompatV1: column mapping id mode; Delta Kernel 4.4.0 IcebergWriterCompatV3"),
    Rule("column-mapping.field-id", "Every field has a column mapping id", ALL_LEVELS, field_ids,
         _ENABLE, "protocol: Column Mapping"),
    Rule("column-mapping.physical-name", "Every field has a physical name", ALL_LEVELS, physical_names,
         _ENABLE, "protocol: Column Mapping"),
    Rule("column-mapping.physical-name-format", "Physical names are col-<id>", _WRITER_COMPAT,
         physical_name_is_col_id, "deltaberg enable rewrites the data with col-<id> physical names",
         "RFC IcebergWriterCompatV1: physical name col-[column id]; Delta Kernel 4.4.0 IcebergWriterCompatV3"),
    Rule("column-mapping.unique-ids", "Column ids are unique", ALL_LEVELS, unique_ids,
         "reassign the duplicate ids (deltaberg enable --mode rewrite)", "protocol: Column Mapping"),
    Rule("column-mapping.max-column-id", "maxColumnId covers every id", ALL_LEVELS, max_column_id,
         f"set {MAX_COLUMN_ID} to at least the largest id in use", "protocol: Column Mapping writer requirements"),
    Rule("nested-ids.present", "Array elements and map keys/values have ids", frozenset({V2, WV1, V3}),
         nested_ids_present, "assign nested ids (deltaberg enable)",
         "protocol: IcebergCompatV2, storing identifiers for nested fields (IcebergCompatV3: the same)"),
    Rule("nested-ids.unique", "Nested ids are unique and distinct from column ids", frozenset({V2, WV1, V3}),
         nested_ids_unique, "reassign the nested ids (deltaberg enable)",
         "protocol: IcebergCompatV2, storing identifiers for nested fields (IcebergCompatV3: the same)"),
    Rule("types.compat-v2-allowlist", "Only IcebergCompatV2 types", frozenset({V2, WV1}), v2_type_allowlist,
         "drop or cast the column to an allowed type", "protocol: IcebergCompatV2 type allow-list"),
    Rule("types.compat-v3-allowlist", "Only IcebergCompatV3 types", frozenset({V3}), v3_type_allowlist,
         "drop or cast the column to an allowed type", "RFC IcebergCompatV3: type allow-list"),
    Rule("types.no-byte-short", "No byte or short columns", _WRITER_COMPAT, no_byte_short,
         "widen byte/short columns to integer (deltaberg enable rewrites them)",
         "RFC IcebergWriterCompatV1: no byte or short; Delta Kernel 4.4.0 IcebergWriterCompatV3"),
    Rule("types.widening-allowlist", "Only type changes Iceberg can express", frozenset({V3}),
         type_widening_allowlist, "recreate the column (or the table) with its current type",
         "RFC IcebergCompatV3: type widening allow-list"),
    Rule("partitions.primitive-types", "Partition columns have primitive types Iceberg can partition by",
         frozenset({V3}), partition_types, "partition by a column of another type",
         "Delta Kernel 4.4.0 IcebergCompatV3 (allowed partition types)"),
    Rule("defaults.literal", "Column defaults are literals", frozenset({V3}), literal_defaults,
         "ALTER TABLE ... ALTER COLUMN ... SET DEFAULT <literal>, or DROP DEFAULT",
         "RFC IcebergCompatV3: any column write default is a literal value"),
    Rule("types.compat-v1-no-map-array-void", "No map, array or void columns", frozenset({V1}),
         v1_no_map_array_void, "drop the column or use IcebergCompatV2", "protocol: IcebergCompatV1"),
]
