"""The types a Parquet checkpoint's columns must have: the protocol's checkpoint schema (Checkpoint Schema).

A checkpoint (or a sidecar) is a Parquet file whose columns are the actions, each a struct of the action's fields.
A column of another type (``add`` a string, ``add.partitionValues`` a string, ``add.stats`` binary, ...) is not a
checkpoint the reader can take at its word: casting it would invent values, and reading it fails far away with an
error naming no file. ``checkpoint_type_problem`` tells it from the schema alone, before any row is read.

Accepted as the same type: any integer width for an integer field (the values are the same), ``large_string``
(and ``string_view``) for a string, ``large_list`` for a list. Fields and columns the protocol does not name
(``partitionValues_parsed``, ``stats_parsed``, ``commitInfo``, a writer's own) are not checked here, and a missing
field is not a wrong type (a required field that is absent is refused where the rows are read).
"""

from __future__ import annotations

import pyarrow as pa

STRING, LONG, INT, BOOL = "string", "long", "int", "boolean"
STRING_MAP = ("map", STRING, STRING)
STRING_LIST = ("list", STRING)
Kind = str | tuple | dict
_DV = {"storageType": STRING, "pathOrInlineDv": STRING, "offset": INT, "sizeInBytes": INT, "cardinality": LONG}
_FILE_FIELDS = {"path": STRING, "partitionValues": STRING_MAP, "size": LONG, "dataChange": BOOL, "stats": STRING,
                "tags": STRING_MAP, "deletionVector": _DV, "baseRowId": LONG, "defaultRowCommitVersion": LONG}
CHECKPOINT_COLUMNS: dict[str, dict[str, Kind]] = {
    "add": {**_FILE_FIELDS, "modificationTime": LONG, "clusteringProvider": STRING},
    "remove": {**_FILE_FIELDS, "deletionTimestamp": LONG, "extendedFileMetadata": BOOL},
    "metaData": {"id": STRING, "name": STRING, "description": STRING,
                 "format": {"provider": STRING, "options": STRING_MAP}, "schemaString": STRING,
                 "partitionColumns": STRING_LIST, "configuration": STRING_MAP, "createdTime": LONG},
    "protocol": {"minReaderVersion": INT, "minWriterVersion": INT, "readerFeatures": STRING_LIST,
                 "writerFeatures": STRING_LIST},
    "txn": {"appId": STRING, "version": LONG, "lastUpdated": LONG},
    "domainMetadata": {"domain": STRING, "configuration": STRING, "removed": BOOL},
    "checkpointMetadata": {"version": LONG, "tags": STRING_MAP},
    "sidecar": {"path": STRING, "sizeInBytes": LONG, "modificationTime": LONG, "tags": STRING_MAP},
}


def _describe(kind: Kind) -> str:
    if isinstance(kind, dict):
        return "struct"
    if isinstance(kind, tuple):
        return f"{kind[0]}<{', '.join(kind[1:])}>"
    return kind


def _fits(typ: pa.DataType, kind: Kind) -> bool:
    """Whether a column's type is the protocol type ``kind`` (the nested fields of a struct are checked apart)."""
    if isinstance(kind, dict):
        return pa.types.is_struct(typ)
    if isinstance(kind, tuple):
        if kind[0] == "map":
            return pa.types.is_map(typ) and _fits(typ.key_type, kind[1]) and _fits(typ.item_type, kind[2])
        is_list = pa.types.is_list(typ) or pa.types.is_large_list(typ)
        return is_list and _fits(typ.value_type, kind[1])
    if kind == STRING:
        return pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ)
    if kind in (LONG, INT):
        return pa.types.is_integer(typ)
    return pa.types.is_boolean(typ)


def _problem(name: str, typ: pa.DataType, kind: Kind) -> str | None:
    if not _fits(typ, kind):
        return f"column {name} has the type {typ}, not the protocol's {_describe(kind)}"
    if isinstance(kind, dict):
        for field in typ:
            if field.name in kind:
                found = _problem(f"{name}.{field.name}", field.type, kind[field.name])
                if found is not None:
                    return found
    return None


def checkpoint_type_problem(schema: pa.Schema) -> str | None:
    """The first column (or field of an action's struct) of a checkpoint's Arrow schema whose type is not the
    protocol's, as the end of a sentence starting "the checkpoint's"; None when all are."""
    for field in schema:
        kind = CHECKPOINT_COLUMNS.get(field.name)
        if kind is not None:
            found = _problem(field.name, field.type, kind)
            if found is not None:
                return found
    return None
