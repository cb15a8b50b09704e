"""Small Delta tables for the Airflow tests: one IcebergWriterCompatV1-compliant, one plain."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.commit import write_commit

#: What validate() reports for a plain deltalake-written table at level writer-compat-v1.
PLAIN_TABLE_FAILED_RULES = frozenset(
    {
        "protocol.reader-version",
        "protocol.writer-version",
        "protocol.feature.compat-v2",
        "protocol.feature.writer-compat-v1",
        "property.enable-compat-v2",
        "property.enable-writer-compat-v1",
        "column-mapping.mode",
        "column-mapping.id-mode",
    }
)


def _field(name: str, type_name: str, column_id: int) -> dict[str, object]:
    return {
        "name": name,
        "type": type_name,
        "nullable": True,
        "metadata": {
            "delta.columnMapping.id": column_id,
            "delta.columnMapping.physicalName": f"col-{column_id}",
        },
    }


def write_compliant_table(path: Path | str) -> Path | str:
    """Create an empty IcebergWriterCompatV1 table at ``path`` (a directory or a URI; version 0) with the core
    commit writer."""
    if isinstance(path, Path):
        path.mkdir(parents=True, exist_ok=True)
    schema = {"type": "struct", "fields": [_field("id", "long", 1), _field("name", "string", 2)]}
    actions = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["columnMapping"],
                "writerFeatures": ["columnMapping", "icebergCompatV2", "icebergWriterCompatV1"],
            }
        },
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {
                    "delta.columnMapping.mode": "id",
                    "delta.columnMapping.maxColumnId": "2",
                    "delta.enableIcebergCompatV2": "true",
                    "delta.enableIcebergWriterCompatV1": "true",
                },
                "createdTime": 1_700_000_000_000,
            }
        },
    ]
    write_commit(DeltaTable(str(path)), actions, read_version=None, operation="CREATE TABLE")
    return path


def write_plain_table(path: Path) -> Path:
    """Create a table with deltalake's defaults (no column mapping, no IcebergCompat features)."""
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    return path


def disable_writer_compat(path: Path) -> int:
    """Commit the next version of a table made by ``write_compliant_table`` with
    delta.enableIcebergWriterCompatV1=false (so the latest version is not compliant); returns that version."""
    table = DeltaTable(str(path))
    version = table.latest_version()
    lines = (path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    (metadata,) = [json.loads(line)["metaData"] for line in lines if '"metaData"' in line]
    metadata["configuration"]["delta.enableIcebergWriterCompatV1"] = "false"
    return write_commit(table, [{"metaData": metadata}], read_version=version, operation="SET TBLPROPERTIES")
