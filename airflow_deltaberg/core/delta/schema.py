"""The Delta schema model: every Delta type, nested structs/arrays/maps, column mapping ids and names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_deltaberg.core.errors import SchemaError

COLUMN_MAPPING_ID = "delta.columnMapping.id"
COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"
# Delta on Spark writes nested ids under the first key; the protocol text names the second. Read both.
NESTED_IDS_KEYS = ("delta.columnMapping.nested.ids", "parquet.field.nested.ids")
# Collated strings keep the type name "string"; Delta on Spark puts their collations in the field metadata under
# this key, as a map from the field's path (name, name.element, name.key, name.value) to the collation.
COLLATIONS_KEY = "__COLLATIONS"

PRIMITIVE_TYPES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "void",
    }
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
# Geospatial types carry their CRS (and edge algorithm) in the type name.
_GEO = re.compile(r"^(geometry|geography)(\(.*\))?$")


@dataclass(frozen=True)
class PrimitiveType:
    """A Delta primitive type such as ``long`` or ``decimal(10,2)``."""

    name: str

    @property
    def is_decimal(self) -> bool:
        return self.name.startswith("decimal")

    @property
    def precision_scale(self) -> tuple[int, int]:
        if self.name == "decimal":
            return 10, 0
        match = _DECIMAL.match(self.name)
        if not match:
            raise SchemaError(f"{self.name} is not a decimal type")
        return int(match.group(1)), int(match.group(2))

    def to_json(self) -> Any:
        return self.name

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArrayType:
    element_type: DataType
    contains_null: bool = True

    def to_json(self) -> Any:
        return {"type": "array", "elementType": self.element_type.to_json(), "containsNull": self.contains_null}

    def __str__(self) -> str:
        return f"array<{self.element_type}>"


@dataclass(frozen=True)
class MapType:
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    def to_json(self) -> Any:
        return {
            "type": "map",
            "keyType": self.key_type.to_json(),
            "valueType": self.value_type.to_json(),
            "valueContainsNull": self.value_contains_null,
        }

    def __str__(self) -> str:
        return f"map<{self.key_type},{self.value_type}>"


@dataclass(frozen=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    @property
    def column_mapping_id(self) -> int | None:
        value = self.metadata.get(COLUMN_MAPPING_ID)
        return int(value) if value is not None else None

    @property
    def physical_name(self) -> str:
        """The name of the column in data files (the logical name without column mapping)."""
        return self.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME) or self.name

    @property
    def nested_ids(self) -> dict[str, int]:
        """Ids of array elements and map keys/values below this field, keyed as Delta writes them
        (``<physical name>.element``, ``<physical name>.key``, ``<physical name>.value``...)."""
        ids: dict[str, int] = {}
        for key in NESTED_IDS_KEYS:
            value = self.metadata.get(key)
            if isinstance(value, dict):
                ids.update({k: int(v) for k, v in value.items()})
        return ids

    def nested_id(self, suffix: str) -> int | None:
        """The id of a nested slot below this field, ``suffix`` like ``.element`` or ``.key.value``.

        Delta on Spark keys nested ids by the physical name, the protocol text by the field name: both
        are looked up.
        """
        ids = self.nested_ids
        for prefix in dict.fromkeys((self.physical_name, self.name)):
            value = ids.get(f"{prefix}{suffix}")
            if value is not None:
                return value
        return None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type.to_json(), "nullable": self.nullable, "metadata": self.metadata}


@dataclass(frozen=True)
class StructType:
    fields: tuple[StructField, ...] = ()

    def field(self, name: str) -> StructField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def walk(self, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], StructField]]:
        """Every field, nested ones included (inside structs, array elements and map values),
        with its logical path."""
        for f in self.fields:
            path = (*prefix, f.name)
            yield path, f
            yield from _walk_type(f.type, path)

    def to_json(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}

    def to_json_string(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    def __str__(self) -> str:
        return "struct<" + ",".join(f"{f.name}:{f.type}" for f in self.fields) + ">"


DataType = PrimitiveType | ArrayType | MapType | StructType


def _walk_type(t: DataType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], StructField]]:
    if isinstance(t, StructType):
        yield from t.walk(path)
    elif isinstance(t, ArrayType):
        yield from _walk_type(t.element_type, (*path, "element"))
    elif isinstance(t, MapType):
        yield from _walk_type(t.key_type, (*path, "key"))
        yield from _walk_type(t.value_type, (*path, "value"))


# The deepest nesting of struct/array/map types read (the table's struct is level 1). Real schemas stay far
# below it (BigQuery, for one, allows 15). The code that walks a schema (here, the Iceberg conversion, pyiceberg
# and pydantic) recurses once or more per level: a schema nested thousands deep ends in a RecursionError, and
# pyiceberg 0.12 already fails to read back the metadata of a table whose structs nest about 60 deep.
MAX_TYPE_DEPTH = 32
MAX_DECIMAL_PRECISION = 38


def parse_type(value: Any, depth: int = 1) -> DataType:
    """Parse one type from its JSON form (a string for primitives, an object for nested types); ``depth`` is
    the nesting level of ``value`` if it is a nested type."""
    if isinstance(value, str):
        if value in PRIMITIVE_TYPES or value == "decimal" or _GEO.match(value):
            return PrimitiveType(value)
        if match := _DECIMAL.match(value):
            _check_decimal(value, int(match.group(1)), int(match.group(2)))
            return PrimitiveType(value)
        raise SchemaError(f"unknown Delta type {value!r}")
    if not isinstance(value, dict):
        raise SchemaError(f"a type must be a string or an object, got {_short(value)}")
    kind = value.get("type")
    if kind in ("struct", "array", "map") and depth > MAX_TYPE_DEPTH:
        raise SchemaError(f"types are nested more than {MAX_TYPE_DEPTH} levels deep")
    try:
        if kind == "struct":
            fields = value["fields"]
            if not isinstance(fields, list):
                raise SchemaError(f"the fields of a struct must be a list, got {_short(fields)}")
            struct = StructType(tuple(_parse_field(f, depth + 1) for f in fields))
            _refuse_names_differing_in_case(struct)
            return struct
        if kind == "array":
            return ArrayType(parse_type(value["elementType"], depth + 1),
                             _flag(value, "containsNull", "an array type"))
        if kind == "map":
            return MapType(
                parse_type(value["keyType"], depth + 1),
                parse_type(value["valueType"], depth + 1),
                _flag(value, "valueContainsNull", "a map type"),
            )
    except KeyError as exc:
        raise SchemaError(f"a {kind} type lacks the field {exc.args[0]!r}") from exc
    raise SchemaError(f"unknown Delta type {_short(kind)}")


def _check_decimal(name: str, precision: int, scale: int) -> None:
    # Delta (as Spark) allows precision 1..38 and a scale from 0 up to the precision.
    if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise SchemaError(f"invalid type {name}: a decimal has a precision of 1 to {MAX_DECIMAL_PRECISION} and a "
                          "scale of 0 up to its precision")


def _parse_field(f: Any, depth: int) -> StructField:
    if not isinstance(f, dict):
        raise SchemaError(f"a struct field must be an object, got {_short(f)}")
    name = f.get("name")
    if not isinstance(name, str):
        raise SchemaError(f"a struct field name must be a string, got {_short(name)}")
    _check_field_metadata(f)
    return StructField(name=name, type=parse_type(f["type"], depth), nullable=_flag(f, "nullable", f"field {name!r}"),
                       metadata=dict(f.get("metadata") or {}))


def _refuse_names_differing_in_case(struct: StructType) -> None:
    # Delta column names are case-insensitive: Delta on Spark (COLUMN_ALREADY_EXISTS) and delta-kernel ("Duplicate
    # field name (case-insensitive)") refuse a struct with two such fields.
    seen: dict[str, str] = {}
    for f in struct.fields:
        folded = f.name.lower()
        if folded in seen:
            raise SchemaError(f"a struct has the fields {seen[folded]!r} and {f.name!r}: Delta column names are "
                              "case-insensitive")
        seen[folded] = f.name


def _flag(value: dict[str, Any], key: str, what: str) -> bool:
    """A required boolean of a schema object (nullable, containsNull, valueContainsNull: Delta on Spark and
    delta-kernel refuse a schema without one)."""
    if key not in value:
        raise SchemaError(f"{what} lacks the field {key!r}")
    flag = value[key]
    if not isinstance(flag, bool):
        raise SchemaError(f"{key} of {what} must be a boolean, got {_short(flag)}")
    return flag


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_field_metadata(f: dict[str, Any]) -> None:
    metadata = f.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise SchemaError(f"the metadata of field {f.get('name')!r} is not an object")
    cid = metadata.get(COLUMN_MAPPING_ID)
    # deltalake has been seen writing the id as a JSON string of digits: the same id, read as such.
    digits = isinstance(cid, str) and cid.isascii() and cid.isdigit()
    if cid is not None and not digits and (isinstance(cid, bool) or not isinstance(cid, int)):
        raise SchemaError(f"field {f.get('name')!r} has a non-integer {COLUMN_MAPPING_ID}: {cid!r}")
    physical = metadata.get(COLUMN_MAPPING_PHYSICAL_NAME)
    if physical is not None and not isinstance(physical, str):
        raise SchemaError(
            f"field {f.get('name')!r} has a non-string {COLUMN_MAPPING_PHYSICAL_NAME}: {_short(physical)}"
        )
    for key in NESTED_IDS_KEYS:
        ids = metadata.get(key)
        if ids is not None and not (
            isinstance(ids, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in ids.values())
        ):
            raise SchemaError(f"field {f.get('name')!r} has malformed {key}: {ids!r}")


def parse_schema(schema_string: str) -> StructType:
    """Parse a metaData ``schemaString``."""
    if not isinstance(schema_string, str):
        raise SchemaError(f"schemaString must be a string, got {_short(schema_string)}")
    try:
        value = json.loads(schema_string)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schemaString is not JSON: {exc}") from exc
    except RecursionError as exc:  # the JSON parser recurses once per nested array or object
        raise SchemaError(f"types are nested more than {MAX_TYPE_DEPTH} levels deep") from exc
    schema = parse_type(value)
    if not isinstance(schema, StructType):
        raise SchemaError("the table schema must be a struct")
    return schema


#: The table property holding the largest column mapping id a writer has assigned (protocol: Column Mapping).
MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"


def column_ids(schema: StructType) -> list[int]:
    """Every column mapping id of the schema, nested ids (of array elements, map keys and values) included: the ids
    ``delta.columnMapping.maxColumnId`` covers."""
    ids = [f.column_mapping_id for _, f in schema.walk() if f.column_mapping_id is not None]
    ids += [i for _, f in schema.walk() for i in f.nested_ids.values()]
    return ids


def changed_column_id(before: StructType, after: StructType) -> tuple[str, int, int] | None:
    """A column of ``after`` whose column mapping id differs from the one the same physical column (its path of
    physical names) has in ``before``: (its logical path, the id before, the id after); None when there is none.
    A column's id is fixed when the column is added (protocol, Column Mapping): data files written before carry the
    old one, and readers resolving columns by id would not find them."""
    old = _ids_by_physical_path(before)
    for physical, (path, cid) in _ids_by_physical_path(after).items():
        previous = old.get(physical)
        if previous is not None and previous[1] != cid:
            return path, previous[1], cid
    return None


def _ids_by_physical_path(schema: StructType) -> dict[tuple[str, ...], tuple[str, int]]:
    out: dict[tuple[str, ...], tuple[str, int]] = {}

    def visit(t: DataType, physical: tuple[str, ...], logical: str) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                path = f"{logical}.{f.name}" if logical else f.name
                if f.column_mapping_id is not None:
                    out[(*physical, f.physical_name)] = (path, f.column_mapping_id)
                visit(f.type, (*physical, f.physical_name), path)
        elif isinstance(t, ArrayType):
            visit(t.element_type, (*physical, "element"), logical)
        elif isinstance(t, MapType):
            visit(t.key_type, (*physical, "key"), logical)
            visit(t.value_type, (*physical, "value"), logical)

    visit(schema, (), "")
    return out


def check_column_mapping(schema: StructType) -> None:
    """Raise SchemaError where a reader of a table with column mapping (mode id or name) could not tell two columns
    apart, as Delta's kernel refuses them ("Duplicate column mapping ID", "Duplicate physicalName"): two fields with
    one column mapping id anywhere in the schema ("every column - nested or leaf - is assigned ... a unique 32-bit
    integer as an id"), or two fields of one struct with one physical name. Physical names are only held unique
    among the fields of a struct, what a reader resolves them among: a table that turns column mapping on keeps
    its column names as physical names, and two structs may both have an ``x``. (Nested ids of arrays and maps
    are left to the IcebergCompat rules: Delta readers do not use them.)"""
    ids: dict[int, str] = {}

    def visit(struct: StructType, prefix: str) -> None:
        names: dict[str, str] = {}
        for f in struct.fields:
            path = f"{prefix}{f.name}"
            if f.physical_name in names:
                raise SchemaError(f"the columns {names[f.physical_name]!r} and {path!r} have the same physical name "
                                  f"{f.physical_name!r}")
            names[f.physical_name] = path
            cid = f.column_mapping_id
            if cid is not None:
                if cid in ids:
                    raise SchemaError(f"the columns {ids[cid]!r} and {path!r} have the same column mapping id {cid}")
                ids[cid] = path
            for nested in _structs_in(f.type):
                visit(nested, f"{path}.")

    visit(schema, "")


def unmapped_column(schema: StructType) -> tuple[str, list[str]] | None:
    """The first column (its path) that lacks a column mapping id or physical name, with the keys it lacks; None
    when every column has both, as column mapping (mode id or name) gives every column."""
    for path, f in schema.walk():
        missing = [key for key in (COLUMN_MAPPING_ID, COLUMN_MAPPING_PHYSICAL_NAME) if f.metadata.get(key) is None]
        if missing:
            return ".".join(path), missing
    return None


def holds_type(schema: StructType, name: str) -> bool:
    """Whether a column of ``schema``, or an array element, map key or value below one, has the primitive type
    ``name``."""
    return any(isinstance(t, PrimitiveType) and t.name == name
               for _, f in schema.walk() for t in [f.type, *(s for _, s in nested_slots(f.type))])


def _structs_in(t: DataType) -> Iterator[StructType]:
    """The structs directly below a type: itself, or inside its array elements and map keys/values."""
    if isinstance(t, StructType):
        yield t
    elif isinstance(t, ArrayType):
        yield from _structs_in(t.element_type)
    elif isinstance(t, MapType):
        yield from _structs_in(t.key_type)
        yield from _structs_in(t.value_type)


def nested_slots(t: DataType, prefix: str = "") -> Iterator[tuple[str, DataType]]:
    """``.element`` / ``.key`` / ``.value`` suffixes (chained for nested arrays/maps) of the slots below a
    field, down to the next struct, with each slot's type: the keys of Delta's nested ids."""
    if isinstance(t, ArrayType):
        key = f"{prefix}.element"
        yield key, t.element_type
        yield from nested_slots(t.element_type, key)
    elif isinstance(t, MapType):
        for part, child in (("key", t.key_type), ("value", t.value_type)):
            key = f"{prefix}.{part}"
            yield key, child
            yield from nested_slots(child, key)
