"""Delta schema -> Iceberg schema, with stable field ids and a name mapping for files without field ids.

Ids: under column mapping, Iceberg field ids are the Delta column ids and the nested ids of array
elements and map keys/values. Without column mapping, ids are assigned depth-first; given the previous
Iceberg schema, a field keeps the id of the field at the same name path, so ids stay stable when the
Delta schema evolves.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field
from pyiceberg import types as it
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.name_mapping import MappedField, NameMapping

from airflow_deltaberg.core.delta.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from airflow_deltaberg.core.errors import ColumnTypeChangeError, TypeChangeRefusedError, UnsupportedTypeError

NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
TYPE_CHANGES = "delta.typeChanges"
CHAR_VARCHAR_TYPE = "__CHAR_VARCHAR_TYPE_STRING"
#: Data files of tables with Change Data Feed may hold an extra ``_change_type`` column that is not in the
#: table schema (Delta protocol, Change Data Files): Delta on Spark writes it, null, into the data files of its
#: UPDATE, DELETE and MERGE commits. Iceberg allows a name mapping entry without a field id for such columns, but
#: pyiceberg 0.12 refuses to read a file with a column its mapping lacks ("Could not find field with name"), or
#: maps without an id; mapping it to the highest id a table may use (spec: Reserved Field IDs: none greater than
#: 2147483447), never a schema field, lets readers project it away. Only tables whose files may hold it get it.
CHANGE_TYPE_COLUMN = "_change_type"
CHANGE_TYPE_FIELD_ID = 2_147_483_447

_PRIMITIVES: dict[str, it.IcebergType] = {
    "byte": it.IntegerType(),
    "short": it.IntegerType(),
    "integer": it.IntegerType(),
    "long": it.LongType(),
    "float": it.FloatType(),
    "double": it.DoubleType(),
    "string": it.StringType(),
    "binary": it.BinaryType(),
    "boolean": it.BooleanType(),
    "date": it.DateType(),
    "timestamp": it.TimestamptzType(),
    "timestamp_ntz": it.TimestampType(),
}




class VariantType(it.PrimitiveType):
    """Iceberg v3 ``variant`` (spec: Semi-structured Types), which pyiceberg 0.12 lacks: its metadata form is the
    string ``variant``; data files hold it as Parquet's variant group (metadata, value[, typed_value])."""

    root: Literal["variant"] = Field(default="variant")

    def minimum_format_version(self) -> int:
        return 3


_GEO_PARAMETERS = re.compile(r"^(geometry|geography)(?:\((.*)\))?$")


def _v3_type(t: PrimitiveType) -> it.IcebergType | None:
    if t.name == "variant":
        return VariantType()
    match = _GEO_PARAMETERS.match(t.name)
    if not match:
        return None
    parameters = [p.strip().strip("'\"") for p in (match.group(2) or "").split(",") if p.strip()]
    if match.group(1) == "geometry":
        return it.GeometryType(*parameters[:1])
    return it.GeographyType(*parameters[:2])


#: Iceberg's per-column metrics mode property (Iceberg "Write properties").
METRICS_MODE_PROPERTY = "write.metadata.metrics.column.{}"


@dataclass(frozen=True)
class ConvertedSchema:
    schema: Schema
    name_mapping: NameMapping
    last_column_id: int
    #: Table properties the schema calls for (metrics modes).
    properties: dict[str, str] = field(default_factory=dict)

    def name_mapping_json(self) -> str:
        return self.name_mapping.model_dump_json()


#: What decides whether a slot keeps its field id: the Iceberg type of a primitive, the kind of a nested type.
Shape = it.IcebergType | str


def _shape_of_iceberg(t: it.IcebergType) -> Shape:
    if isinstance(t, it.StructType):
        return "struct"
    if isinstance(t, it.ListType):
        return "list"
    if isinstance(t, it.MapType):
        return "map"
    return t


def _shape_of_delta(t: DataType) -> Shape | None:
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ArrayType):
        return "list"
    if isinstance(t, MapType):
        return "map"
    if isinstance(t, PrimitiveType):
        with contextlib.suppress(ValueError):
            if t.is_decimal:
                return it.DecimalType(*t.precision_scale)
            return _PRIMITIVES.get(t.name) or _v3_type(t)
    return None


def _keeps_id(old: Shape, new: Shape | None) -> bool:
    """Whether a slot of shape ``old`` may keep its id as ``new``: Iceberg's schema evolution keeps an id only for
    the same kind of nested type, or a primitive that reads as the new one (an allowed promotion)."""
    if new is None:
        return True  # refused later for its type
    if isinstance(old, str) or isinstance(new, str):
        return old == new
    return _promotable(old, new)


class _IdAllocator:
    """Hands out ids: fixed ones from column mapping, earlier ones by name path (of the newest earlier schema whose
    slot there the new type may keep), or fresh ones."""

    def __init__(self, previous: dict[tuple[str, ...], list[tuple[int, Shape]]], start: int,
                 reserved: frozenset[int] = frozenset(), pinned: dict[int, Shape] | None = None):
        self.previous = previous
        self.next_id = start
        self.reserved = reserved  # ids Delta assigned (column mapping): never handed out for another slot
        self.pinned = pinned or {}  # the shape each earlier id had last (column mapping: the id cannot change)
        self.used: set[int] = set()

    def id_for(self, path: tuple[str, ...], fixed: int | None, shape: Shape | None = None) -> int:
        if fixed is not None:
            old = self.pinned.get(fixed)
            if old is not None and not _keeps_id(old, shape):
                raise ColumnTypeChangeError(f"column {'.'.join(path)} changed type from {old} to {shape}")
            return fixed
        for field_id, old in self.previous.get(path, ()):
            if field_id not in self.reserved and field_id not in self.used and _keeps_id(old, shape):
                self.used.add(field_id)
                return field_id
        self.next_id += 1
        return self.next_id


def _slots(schema: Schema) -> Iterator[tuple[tuple[str, ...], int, it.IcebergType, bool]]:
    """(name path, field id, type, whether a named field) of every slot of a schema (list elements as 'element', map
    'key'/'value', which are not named fields)."""

    def walk(t: it.IcebergType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], int, it.IcebergType, bool]]:
        if isinstance(t, it.StructType):
            for f in t.fields:
                yield (*path, f.name), f.field_id, f.field_type, True
                yield from walk(f.field_type, (*path, f.name))
        elif isinstance(t, it.ListType):
            yield (*path, "element"), t.element_id, t.element_type, False
            yield from walk(t.element_type, (*path, "element"))
        elif isinstance(t, it.MapType):
            yield (*path, "key"), t.key_id, t.key_type, False
            yield (*path, "value"), t.value_id, t.value_type, False
            yield from walk(t.key_type, (*path, "key"))
            yield from walk(t.value_type, (*path, "value"))

    yield from walk(schema.as_struct(), ())


def _earlier_slots(schemas: Sequence[Schema]) -> tuple[dict[tuple[str, ...], list[tuple[int, Shape]]],
                                                       dict[int, Shape]]:
    """The ids and shapes each name path had in ``schemas`` (newest first), and the newest shape of each named
    field's id. Only named fields: under column mapping their ids are Delta's, while a list element or map key/value
    without Delta's nested ids got one of ours, which Delta may give a column later (no type change of a column)."""
    by_path: dict[tuple[str, ...], list[tuple[int, Shape]]] = {}
    by_id: dict[int, Shape] = {}
    for schema in schemas:
        for path, field_id, t, named in _slots(schema):
            shape = _shape_of_iceberg(t)
            if (field_id, shape) not in by_path.setdefault(path, []):
                by_path[path].append((field_id, shape))
            if named:
                by_id.setdefault(field_id, shape)
    return by_path, by_id


def _delta_ids(schema: StructType) -> frozenset[int]:
    ids: set[int] = set()
    for _, f in schema.walk():
        if f.column_mapping_id is not None:
            ids.add(f.column_mapping_id)
        ids.update(f.nested_ids.values())
    return frozenset(ids)


def convert_schema(
    delta_schema: StructType,
    column_mapping_mode: str,
    *,
    table: str,
    previous: Schema | None = None,
    previous_last_column_id: int = 0,
    schema_id: int = 0,
    partition_columns: tuple[str, ...] = (),
    format_version: int = 2,
    earlier: Sequence[Schema] = (),
    version: int | None = None,
    same_mapping_mode: bool = True,
    change_data_feed: bool = False,
) -> ConvertedSchema:
    """The Iceberg schema and name mapping of a Delta schema.

    Partition columns are made optional: Delta does not store them in data files, and some Iceberg
    readers (pyiceberg 0.12) refuse a required column that a file lacks even when the partition value
    supplies it. Optional is a looser contract, so every reader still gets the same rows.

    ``earlier`` are the table's other retained schemas (newest first) after ``previous``. A slot keeps the id its
    name path had in the newest of them where its type may keep it (Iceberg's schema evolution: the same kind of
    nested type, or an allowed promotion); a column whose type changed otherwise (double -> string by an
    overwrite) gets a new id, so that no file or manifest bound of the old type is read as the new one. Under
    column mapping Delta pins the id: such a change is refused with TypeChangeRefusedError (naming ``version``),
    unless the earlier schemas were of another column mapping mode (``same_mapping_mode`` False: the history
    starts afresh).

    ``change_data_feed``: the table's data files may hold the change data feed's ``_change_type``; the name mapping
    then maps it too (``CHANGE_TYPE_FIELD_ID``), otherwise it holds only the schema's columns.
    """
    mapped = column_mapping_mode in ("name", "id")
    delta_ids = _delta_ids(delta_schema) if mapped else frozenset()
    start = max(previous_last_column_id, *delta_ids, 0)
    # Slots without a Delta id (every field without column mapping; list elements and map keys/values without
    # nested ids under it) keep the id of the same name path in the previous schema, so an unchanged Delta
    # schema keeps its Iceberg schema.
    by_path, by_id = _earlier_slots([*([previous] if previous is not None else []), *earlier])
    ids = _IdAllocator(by_path, start, delta_ids, by_id if mapped and same_mapping_mode else None)
    try:
        fields, mappings = _convert_struct(delta_schema, (), ids, mapped, table, format_version)
    except ColumnTypeChangeError as exc:
        raise TypeChangeRefusedError(
            f"{exc} while Delta's column mapping "
            "keeps its field id; Iceberg readers would read the files and bounds of the old type as the new one. "
            "Convert with --full after rewriting the table, or add the column under a new name",
            table=table, version=version) from exc
    fields = [
        it.NestedField(f.field_id, f.name, f.field_type, required=False, doc=f.doc)
        if f.name in partition_columns else f
        for f in fields
    ]
    if change_data_feed and not any(CHANGE_TYPE_COLUMN in m.names for m in mappings):
        mappings.append(MappedField(field_id=CHANGE_TYPE_FIELD_ID, names=[CHANGE_TYPE_COLUMN]))
    try:
        schema = Schema(*fields, schema_id=schema_id)
    except ValueError as exc:  # e.g. a column named "s.x" next to struct s with field x: ambiguous for Iceberg
        raise UnsupportedTypeError(f"the schema has no valid Iceberg form: {exc} (table {table})") from exc
    last = max([start, ids.next_id, *[fid for fid in field_ids(schema.as_struct())]])
    return ConvertedSchema(schema, NameMapping(mappings), last, {**_metrics_modes(schema), **_read_properties(schema)})


#: Iceberg's Spark reader property for vectorized Parquet reads (Iceberg "Read properties").
VECTORIZATION_PROPERTY = "read.parquet.vectorization.enabled"


def _read_properties(schema: Schema) -> dict[str, str]:
    """Vectorized reads off for tables with a variant column. Delta writes shredded variants (variantShredding)
    in Parquet's shredded layout, which Iceberg Java 1.12's row reader reads as written but its vectorized
    reader, Spark's default, refuses ("Unsupported variant: shredded typed_value primitive"). A table may start
    shredding at any later commit, so every table with a variant gets the property."""
    if any(isinstance(schema.find_type(i), VariantType) for i in field_ids(schema.as_struct())):
        return {VECTORIZATION_PROPERTY: "false"}
    return {}


def _metrics_modes(schema: Schema) -> dict[str, str]:
    """``counts`` for timestamp columns. Delta truncates timestamp stats to milliseconds, so their converted
    bounds are true bounds (the maximum rounded up) but not the real minimum and maximum; Iceberg Java answers
    min()/max() from the bounds (aggregate push-down) unless the column's metrics mode says they are not exact.
    The bounds stay in the manifests, so scans still prune with them."""
    modes = {}
    for field_id in field_ids(schema.as_struct()):
        if isinstance(schema.find_type(field_id), it.TimestampType | it.TimestamptzType):
            modes[METRICS_MODE_PROPERTY.format(schema.find_column_name(field_id))] = "counts"
    return modes


def field_ids(t: it.IcebergType) -> Iterator[int]:
    """Every field id of a type, nested ones included."""
    if isinstance(t, it.StructType):
        for f in t.fields:
            yield f.field_id
            yield from field_ids(f.field_type)
    elif isinstance(t, it.ListType):
        yield t.element_id
        yield from field_ids(t.element_type)
    elif isinstance(t, it.MapType):
        yield t.key_id
        yield t.value_id
        yield from field_ids(t.key_type)
        yield from field_ids(t.value_type)


def _names(field: StructField, mapped: bool) -> list[str]:
    # Data files name columns by physical name under column mapping. Files written before column mapping
    # was enabled use the names of that time, which Delta made the physical names, so the logical name must
    # not be listed: after a drop and re-add (or a rename and re-add) it would resolve to another column.
    return [field.physical_name if mapped else field.name]


def _convert_struct(
    struct: StructType, path: tuple[str, ...], ids: _IdAllocator, mapped: bool, table: str, format_version: int = 2
) -> tuple[list[it.NestedField], list[MappedField]]:
    fields: list[it.NestedField] = []
    mappings: list[MappedField] = []
    for f in struct.fields:
        field_path = (*path, f.name)
        fixed = f.column_mapping_id if mapped else None
        if mapped and fixed is None:
            raise UnsupportedTypeError(
                f"column {'.'.join(field_path)} has no delta.columnMapping.id although the table uses column "
                f"mapping (table {table})"
            )
        # A change Delta recorded (type widening) is judged by _check_type_changes, with its own message.
        field_id = ids.id_for(field_path, fixed, None if f.metadata.get(TYPE_CHANGES) else _shape_of_delta(f.type))
        _refuse_char(f, field_path, table)
        iceberg_type, children = _convert_type(f.type, field_path, f, "", ids, mapped, table, format_version)
        _check_type_changes(f, iceberg_type, field_path, table, format_version)
        fields.append(it.NestedField(field_id, f.name, iceberg_type, required=not f.nullable))
        mappings.append(MappedField(field_id=field_id, names=_names(f, mapped), fields=children))
    return fields, mappings


def _refuse_char(f: StructField, path: tuple[str, ...], table: str) -> None:
    # Spark keeps CHAR(n) as a string with this metadata and pads values to n on read; Iceberg has no char type
    # and returns the stored, unpadded values.
    declared = str(f.metadata.get(CHAR_VARCHAR_TYPE, "")).lower()
    if declared.startswith("char"):
        raise UnsupportedTypeError(
            f"column {'.'.join(path)} is {declared}, which Delta on Spark pads to its length on read and Iceberg "
            f"(no char type) would return unpadded (table {table}); change it to STRING or VARCHAR before converting"
        )


def _promotable(source: it.IcebergType, target: it.IcebergType) -> bool:
    """Whether files written as ``source`` read as ``target`` (the spec's valid type promotions, which v3 keeps)."""
    if source == target:
        return True
    if isinstance(source, it.DecimalType) and isinstance(target, it.DecimalType):
        return source.scale == target.scale and source.precision <= target.precision
    return (source, target) in ((it.IntegerType(), it.LongType()), (it.FloatType(), it.DoubleType()))


def _check_type_changes(f: StructField, iceberg_type: it.IcebergType, path: tuple[str, ...], table: str,
                        format_version: int) -> None:
    """Refuse type widening (``delta.typeChanges``) that Iceberg readers of ``format_version`` cannot apply to
    older files."""
    changes = f.metadata.get(TYPE_CHANGES) or []
    for change in changes if isinstance(changes, list) else [changes]:
        change = change if isinstance(change, dict) else {}
        field_path = str(change.get("fieldPath") or "")
        target: it.IcebergType | None = iceberg_type
        for step in field_path.split(".") if field_path else []:
            if isinstance(target, it.ListType) and step == "element":
                target = target.element_type
            elif isinstance(target, it.MapType) and step in ("key", "value"):
                target = target.key_type if step == "key" else target.value_type
            else:
                target = None
        from_name = change.get("fromType")
        source: it.IcebergType | None = None
        if isinstance(from_name, str):
            old = PrimitiveType(from_name)
            with contextlib.suppress(ValueError):  # a malformed decimal(p,s) stays unknown: refused
                source = it.DecimalType(*old.precision_scale) if old.is_decimal else _PRIMITIVES.get(from_name)
        if source is None or target is None or not _promotable(source, target):
            column = ".".join((*path, field_path) if field_path else path)
            raise UnsupportedTypeError(
                f"column {column} was widened from {from_name} to {change.get('toType')} (delta.typeChanges), which "
                f"Iceberg v{format_version} readers cannot apply to the files written before (table {table}); rewrite "
                "those files and drop the typeWidening table feature before converting"
            )


def _convert_type(
    t: DataType,
    path: tuple[str, ...],
    owner: StructField,
    slot: str,
    ids: _IdAllocator,
    mapped: bool,
    table: str,
    format_version: int = 2,
) -> tuple[it.IcebergType, list[MappedField]]:
    if isinstance(t, PrimitiveType):
        if t.is_decimal:
            precision, scale = t.precision_scale
            return it.DecimalType(precision, scale), []
        if t.name in _PRIMITIVES:
            return _PRIMITIVES[t.name], []
        v3 = _v3_type(t)
        if v3 is not None and format_version >= 3:
            return v3, []
        if v3 is not None:
            raise UnsupportedTypeError(
                f"column {'.'.join(path)} has type {t.name}, which Iceberg v2 cannot represent (table {table}); "
                "convert with Iceberg format version 3 (--format-version 3), or drop or cast the column"
            )
        raise UnsupportedTypeError(
            f"column {'.'.join(path)} has type {t.name}, which Iceberg v{format_version} cannot represent "
            f"(table {table}); drop or cast the column before converting"
        )
    if isinstance(t, StructType):
        fields, mappings = _convert_struct(t, path, ids, mapped, table, format_version)
        return it.StructType(*fields), mappings
    if isinstance(t, ArrayType):
        key = f"{slot}.element"
        element_id = ids.id_for((*path, "element"), _nested_id(owner, key, t.element_type, path, table) if mapped
                                else None, _shape_of_delta(t.element_type))
        element, children = _convert_type(t.element_type, (*path, "element"), owner, key, ids, mapped, table,
                                          format_version)
        return (
            it.ListType(element_id, element, element_required=not t.contains_null),
            [MappedField(field_id=element_id, names=["element"], fields=children)],
        )
    if isinstance(t, MapType):
        key_slot, value_slot = f"{slot}.key", f"{slot}.value"
        key_id = ids.id_for((*path, "key"), _nested_id(owner, key_slot, None, path, table) if mapped else None,
                            _shape_of_delta(t.key_type))
        value_id = ids.id_for((*path, "value"), _nested_id(owner, value_slot, t.value_type, path, table) if mapped
                              else None, _shape_of_delta(t.value_type))
        key_type, key_children = _convert_type(t.key_type, (*path, "key"), owner, key_slot, ids, mapped, table,
                                               format_version)
        value_type, value_children = _convert_type(
            t.value_type, (*path, "value"), owner, value_slot, ids, mapped, table, format_version
        )
        return (
            it.MapType(key_id, key_type, value_id, value_type, value_required=not t.value_contains_null),
            [
                MappedField(field_id=key_id, names=["key"], fields=key_children),
                MappedField(field_id=value_id, names=["value"], fields=value_children),
            ],
        )
    raise UnsupportedTypeError(f"column {'.'.join(path)} has an unknown type (table {table})")


def _nested_id(owner: StructField, slot: str, content: DataType | None, path: tuple[str, ...],
               table: str) -> int | None:
    """The Delta nested id of a list element or map key/value slot, if any.

    Under column mapping data files carry parquet field ids, and Iceberg readers resolve columns by id (name
    mapping does not apply to files with ids). Delta writes ids for list elements and map keys/values only with
    nested ids (IcebergCompatV2). Without them, a list element or map value that is a primitive carries no id
    at all and Iceberg Java cannot read it ("... element is not in the store"); elements and values that are
    structs are found through the ids of their fields, and map keys are read by position.
    """
    nested = owner.nested_id(slot)
    if nested is not None or not isinstance(content, PrimitiveType):
        return nested
    raise UnsupportedTypeError(
        f"column {'.'.join(path)} is a list or map of primitives under column mapping without nested ids "
        "(delta.columnMapping.nested.ids): its data files have no field ids for the elements or values, which "
        f"Iceberg readers need (table {table}); enable IcebergCompatV2 or IcebergWriterCompatV1 "
        "(deltaberg enable) before converting"
    )


# pyiceberg 0.12 parses no ``variant`` type: metadata holding one is parsed with a stand-in primitive at the
# variant's ids, which are then given their VariantType back.
_STAND_IN = "string"


def parse_table_metadata(raw: bytes | str) -> TableMetadata:
    """Iceberg table metadata from its JSON, variant columns included."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    if '"variant"' not in text:
        return TableMetadataUtil.parse_raw(text)
    document = json.loads(text)
    variant_ids: set[int] = set()
    for schema in document.get("schemas") or []:
        _stand_in_variants(schema, variant_ids)
    metadata = TableMetadataUtil.parse_obj(document)
    return metadata.model_copy(update={"schemas": [_with_variant_fields(s, variant_ids) for s in metadata.schemas]})


def parse_schema_json(document: Mapping[str, Any]) -> Schema:
    """One Iceberg schema from its JSON object (an entry of a metadata file's ``schemas``), variant columns
    included: what ``parse_table_metadata`` does for each of its schemas. ``document`` is left as it is."""
    copied = copy.deepcopy(dict(document))
    variant_ids: set[int] = set()
    _stand_in_variants(copied, variant_ids)
    schema = Schema.model_validate(copied)
    return _with_variant_fields(schema, variant_ids) if variant_ids else schema


def _with_variant_fields(schema: Schema, ids: set[int]) -> Schema:
    return Schema(*_with_variants(schema.as_struct(), ids).fields, schema_id=schema.schema_id,
                  identifier_field_ids=schema.identifier_field_ids)


def _stand_in_variants(t: object, ids: set[int]) -> None:
    if not isinstance(t, dict):
        return
    slots = {"struct": (), "list": (("element", "element-id"),), "map": (("key", "key-id"), ("value", "value-id"))}
    kind = t.get("type")
    if kind == "struct":
        for f in t.get("fields") or []:
            if f.get("type") == "variant":
                ids.add(f["id"])
                f["type"] = _STAND_IN
            else:
                _stand_in_variants(f.get("type"), ids)
    for key, id_key in slots.get(kind, ()) if isinstance(kind, str) else ():
        if t.get(key) == "variant":
            ids.add(t[id_key])
            t[key] = _STAND_IN
        else:
            _stand_in_variants(t.get(key), ids)


def _with_variants(t: it.IcebergType, ids: set[int]) -> it.IcebergType:
    def slot(field_id: int, inner: it.IcebergType) -> it.IcebergType:
        return VariantType() if field_id in ids else _with_variants(inner, ids)

    if isinstance(t, it.StructType):
        return it.StructType(*[f.model_copy(update={"field_type": slot(f.field_id, f.field_type)}) for f in t.fields])
    if isinstance(t, it.ListType):
        return t.model_copy(update={"element_type": slot(t.element_id, t.element_type)})
    if isinstance(t, it.MapType):
        return t.model_copy(update={"key_type": slot(t.key_id, t.key_type),
                                    "value_type": slot(t.value_id, t.value_type)})
    return t
