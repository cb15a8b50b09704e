"""Log actions shared by the commit and checkpoint readers: the batch of actions one log file gives, the
protocol's required fields of an add or remove, and the checks of a log segment's protocol and metadata.

File actions (add/remove) become one Arrow table (``file_tables.FILE_CHANGES_SCHEMA``); the few other actions
(protocol, metaData, txn, domainMetadata, commitInfo, ...) are parsed as Python dicts. JSON commits are read by
``commit_actions``, Parquet checkpoints by ``checkpoint_actions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.file_checks.file_tables import DV_TYPE
from airflow_deltaberg.core.errors import CorruptLogError

FILE_KINDS = ("add", "remove")


def partition_columns_of(other: Sequence[tuple[int, str, dict[str, Any]]]) -> list[str] | None:
    """Physical partition column names of every metaData action among ``other`` (None if there is none)."""
    from airflow_deltaberg.core.delta.models import Metadata

    names: list[str] | None = None
    for _, name, body in other:
        if name == "metaData":
            try:
                columns = Metadata.from_action(body).physical_partition_columns
            except (KeyError, ValueError, TypeError):
                # Unknown columns: the reader infers them. Only the metaData in force must be valid (replay
                # checks it); an earlier one may be incomplete (Delta Live Tables writes one without schema).
                return None
            names = names or []
            names.extend(c for c in columns if c not in names)
    return names


def check_one_protocol_and_metadata(
    other: Iterable[tuple[int, str, dict[str, Any]]], table: str, file_of: Callable[[int], str]
) -> None:
    """Refuse a version (commit or checkpoint) with more than one protocol or metaData action: the protocol
    allows at most one of each, and which one would be in force is undefined. ``file_of(version)`` names the
    file for the message."""
    seen: set[tuple[int, str]] = set()
    for version, name, _ in other:
        if name == "protocol" or name == "metaData":
            if (version, name) in seen:
                raise CorruptLogError(f"two {name} actions in one version; the protocol allows at most one",
                                      table=table, version=version, file=file_of(version))
            seen.add((version, name))


@dataclass
class ActionBatch:
    """Actions read from a sequence of log files."""

    file_actions: pa.Table
    # (version, action name, action body) for every non-file action, in log order.
    other_actions: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


DV_REQUIRED_FIELDS = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")


def missing_required_field(files: pa.Table) -> tuple[int, str] | None:
    """The first row of a FILE_CHANGES_SCHEMA table whose action lacks a field the protocol requires (an
    add: path, size, partitionValues; a remove: path; a deletion vector: all but offset), with that field's
    name; None when none does. Costs nothing when no value is null (the null counts are known)."""
    is_add = files.column("is_add")
    found = []

    def first(mask: pa.ChunkedArray, name: str) -> None:
        row = pc.index(mask, True).as_py()
        if row >= 0:
            found.append((row, name))

    path = files.column("path")
    if path.null_count:
        first(path.is_null(), "path")
    for name in ("size", "partitionValues"):
        column = files.column(name)
        if column.null_count:
            first(pc.and_(is_add, column.is_null()), name)
    dv = files.column("deletionVector")
    if dv.null_count < len(dv):
        for name in DV_REQUIRED_FIELDS:
            first(pc.and_(dv.is_valid(), pc.struct_field(dv, name).is_null()), f"deletionVector.{name}")
    return min(found) if found else None


ACTION_NOUNS = {"add": "an add", "remove": "a remove"}


def field_or_none(struct: pa.StructArray, name: str) -> pa.Array | None:
    idx = struct.type.get_field_index(name)
    if idx < 0:
        return None
    # .field() ignores the struct's own validity, which is what we want: the row choice comes from is_add.
    return struct.field(idx)


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (pyarrow's Parquet and JSON errors end with, or hold, newlines)."""
    return " ".join(str(exc).split())


def normalize_dv(dv: pa.StructArray) -> pa.Array:
    children = []
    for f in DV_TYPE:
        c = field_or_none(dv, f.name)
        children.append(pa.nulls(len(dv), f.type) if c is None else c.cast(f.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=dv.is_null())
