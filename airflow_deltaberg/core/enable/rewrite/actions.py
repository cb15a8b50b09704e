"""The log actions that swap the rewritten files in: an ``add`` per new file, a ``remove`` per old live file,
all with dataChange=false (the rows stay the same)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_deltaberg.core.enable.rewrite.files import WrittenFile


def add_action(f: WrittenFile) -> dict[str, Any]:
    """The ``add`` of a rewritten file: dataChange=false, as the rows are those of the removed files."""
    return {
        "add": {
            "path": f.path,
            "partitionValues": f.partition_values,
            "size": f.size,
            "modificationTime": f.modification_time,
            "dataChange": False,
            "stats": f.stats,
        }
    }


def _map(value: Any) -> dict[str, Any] | None:
    """A map column value from ``to_pylist`` (a list of pairs) as a dict."""
    return None if value is None else dict(value)


def remove_actions(files: pa.Table, deletion_timestamp: int) -> list[dict[str, Any]]:
    """A ``remove`` (dataChange=false) for every live file of a snapshot (``Snapshot.files``), with its
    deletion vector: readers key a logical file by path and deletion vector together."""
    wanted = ["path", "partitionValues", "size", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"]
    out = []
    for row in files.select(wanted).to_pylist():
        remove: dict[str, Any] = {
            "path": row["path"],
            "deletionTimestamp": deletion_timestamp,
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": _map(row["partitionValues"]) or {},
            "size": row["size"],
        }
        if row["tags"]:
            remove["tags"] = _map(row["tags"])
        if row["deletionVector"] is not None:
            remove["deletionVector"] = {k: v for k, v in row["deletionVector"].items() if v is not None}
        for key in ("baseRowId", "defaultRowCommitVersion"):
            if row[key] is not None:
                remove[key] = row[key]
        out.append({"remove": remove})
    return out
