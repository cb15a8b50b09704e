"""The data contracts of the Delta file tables: one schema per table shape, and the logical file key.

- file changes (``FILE_CHANGES_SCHEMA``): one row per add or remove action, in log order, as the log readers give
  them (a commit range's adds and removes; the replay's input);
- live files (``LIVE_FILES_COLUMNS``): one row per live data file of a snapshot (``Snapshot.files``), the file
  change columns minus ``is_add``/``deletionTimestamp`` plus ``stats_parsed``;
- manifest inputs (``MANIFEST_INPUT_COLUMNS``): the columns of either table that the Iceberg manifests take.

Iceberg's manifest entries are ``core.iceberg.manifests.manifest_schema``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: A deletion vector descriptor (protocol, "Deletion Vector Descriptor Schema").
DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
STRING_MAP = pa.map_(pa.string(), pa.string())

#: File changes: one row per add or remove action, in log order. ``version`` is the commit (or checkpoint) version.
FILE_CHANGES_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("is_add", pa.bool_()),
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
        ("deletionTimestamp", pa.int64()),
    ]
)
#: The columns of an add or remove action (the file change columns after version and is_add).
ACTION_COLUMNS = tuple(f.name for f in FILE_CHANGES_SCHEMA)[2:]

#: Live files: the columns of ``Snapshot.files``, in order. ``stats_parsed`` is the stats as
#: ``stats.stats_type(schema)``; ``version`` the commit or checkpoint an add was read from.
LIVE_FILES_COLUMNS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "stats_parsed",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
    "version",
)

#: What the Iceberg manifests take of live files or file changes (``version``, when there, only names an add in
#: errors; ``stats`` only where no ``stats_parsed`` is there).
MANIFEST_INPUT_COLUMNS = ("path", "partitionValues", "size", "stats", "stats_parsed", "deletionVector", "version")


def empty_file_changes() -> pa.Table:
    # Schema.empty_table() goes through pandas; build the zero-length columns directly.
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in FILE_CHANGES_SCHEMA], schema=FILE_CHANGES_SCHEMA)


def dv_unique_ids(dv: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The unique id of each deletion vector (protocol, "Deletion Vector Descriptor Schema"):
    ``<storageType><pathOrInlineDv>``, plus ``@<offset>`` when the offset is set; empty without a deletion vector."""
    offset = pc.struct_field(dv, "offset")
    offset_str = pc.if_else(offset.is_valid(), pc.binary_join_element_wise("@", offset.cast(pa.string()), ""), "")
    uid = pc.binary_join_element_wise(pc.struct_field(dv, "storageType"), pc.struct_field(dv, "pathOrInlineDv"),
                                      offset_str, "")
    return pc.if_else(dv.is_valid(), uid, "")


_DV_KEY_TYPE = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int64())])


def dv_unique_id(descriptor: Mapping[str, Any]) -> str:
    """``dv_unique_ids`` of one descriptor (a dict as read from the log)."""
    key = {name: descriptor.get(name) for name in _DV_KEY_TYPE.names}
    return dv_unique_ids(pa.array([key], _DV_KEY_TYPE))[0].as_py()


def logical_keys(files: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The logical file of each row (protocol, "Action Reconciliation"): the path and the deletion vector's unique
    id, joined by a NUL (no path holds one), one string per row.

    The path as logged: Delta on Spark (for relative paths) and deltalake compare the strings, so `part%2D1` and
    `part-1` are two logical files to them, and to the replay (the same data file live twice is refused after it,
    see replay.refuse_file_live_twice)."""
    return pc.binary_join_element_wise(files.column("path"), dv_unique_ids(files.column("deletionVector")), "\x00")
