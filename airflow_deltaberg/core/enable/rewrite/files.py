"""The rewrite's file contract: what executors are given (RewriteSpec) and what they hand back for each file
they wrote (WrittenFile), as Arrow batches of WRITTEN_FILES_SCHEMA (Spark rows of WRITTEN_FILES_DDL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from airflow_deltaberg.core.enable.rewrite.stats import DEFAULT_STRING_PREFIX

#: The columns of the Arrow batches (and the Spark rows) describing the files ``write_files`` wrote.
WRITTEN_FILES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modification_time", pa.int64()),
        ("partition_values", pa.string()),  # JSON object, physical name -> serialized value or null
        ("stats", pa.string()),
        ("num_records", pa.int64()),
    ]
)
_SPARK_TYPES = {pa.string(): "string", pa.int64(): "long"}
#: The same columns as a Spark DDL string (the return type of the mapInArrow that writes the files).
WRITTEN_FILES_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in WRITTEN_FILES_SCHEMA)


@dataclass(frozen=True)
class RewriteSpec:
    """What the executors need to write the files of one rewrite (plain values: it is pickled to them)."""

    location: str
    schema_string: str  # the target schemaString (column mapping id mode)
    partition_columns: tuple[str, ...] = ()
    storage_options: Mapping[str, Any] | None = None
    write_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    compression: str = "snappy"
    row_group_rows: int = 1 << 20
    row_group_bytes: int = 128 << 20
    string_prefix: int = DEFAULT_STRING_PREFIX


@dataclass(frozen=True)
class WrittenFile:
    """A data file the rewrite wrote: what its add action needs."""

    path: str  # relative to the table root, URI-encoded as in the log
    size: int
    modification_time: int
    partition_values: dict[str, str | None]
    stats: str
    num_records: int


def written_files_batch(files: Sequence[WrittenFile]) -> pa.RecordBatch:
    """Files as one Arrow batch of ``WRITTEN_FILES_SCHEMA`` (what a mapInArrow task returns)."""
    return pa.RecordBatch.from_pylist(
        [{**asdict(f), "partition_values": json.dumps(f.partition_values)} for f in files],
        schema=WRITTEN_FILES_SCHEMA,
    )


def written_file_from_row(row: Mapping[str, Any]) -> WrittenFile:
    """The inverse of ``written_files_batch`` for one row (a dict, or a Spark Row as a dict)."""
    return WrittenFile(row["path"], int(row["size"]), int(row["modification_time"]),
                       json.loads(row["partition_values"]), row["stats"], int(row["num_records"]))
