"""The Delta schema model: every Delta type, nested structs/arrays/maps, column mapping ids and names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

COLUMN_MAPPING_ID = "delta.columnMapping.id"
COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"
# Delta on Spark writes nested ids under the first key; the protocol text names the second. Read both.
NESTED_IDS_KEYS = ("delta.columnMapping.nested.ids", "parquet.field.nested.ids")

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


class SchemaError(ValueError):
    """A schema string that does not follow the Delta schema serialization format."""


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


def parse_type(value: Any) -> DataType:
    """Parse one type from its JSON form (a string for primitives, an object for nested types)."""
    if isinstance(value, str):
        if value in PRIMITIVE_TYPES or _DECIMAL.match(value) or value == "decimal" or _GEO.match(value):
            return PrimitiveType(value)
        raise SchemaError(f"unknown Delta type {value!r}")
    if not isinstance(value, dict):
        raise SchemaError(f"a type must be a string or an object, got {value!r}")
    kind = value.get("type")
    try:
        if kind == "struct":
            for f in value["fields"]:
                _check_field_metadata(f)
            return StructType(
                tuple(
                    StructField(
                        name=f["name"],
                        type=parse_type(f["type"]),
                        nullable=bool(f.get("nullable", True)),
                        metadata=dict(f.get("metadata") or {}),
                    )
                    for f in value["fields"]
                )
            )
        if kind == "array":
            return ArrayType(parse_type(value["elementType"]), bool(value.get("containsNull", True)))
        if kind == "map":
            return MapType(
                parse_type(value["keyType"]),
                parse_type(value["valueType"]),
                bool(value.get("valueContainsNull", True)),
            )
    except KeyError as exc:
        raise SchemaError(f"a {kind} type lacks the field {exc.args[0]!r}") from exc
    raise SchemaError(f"unknown Delta type {kind!r}")


def _check_field_metadata(f: dict[str, Any]) -> None:
    metadata = f.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise SchemaError(f"the metadata of field {f.get('name')!r} is not an object")
    cid = metadata.get(COLUMN_MAPPING_ID)
    if cid is not None and (isinstance(cid, bool) or not isinstance(cid, int)):
        raise SchemaError(f"field {f.get('name')!r} has a non-integer {COLUMN_MAPPING_ID}: {cid!r}")
    for key in NESTED_IDS_KEYS:
        ids = metadata.get(key)
        if ids is not None and not (
            isinstance(ids, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in ids.values())
        ):
            raise SchemaError(f"field {f.get('name')!r} has malformed {key}: {ids!r}")


def parse_schema(schema_string: str) -> StructType:
    """Parse a metaData ``schemaString``."""
    try:
        value = json.loads(schema_string)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schemaString is not JSON: {exc}") from exc
    schema = parse_type(value)
    if not isinstance(schema, StructType):
        raise SchemaError("the table schema must be a struct")
    return schema


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
