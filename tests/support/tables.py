"""Small Delta tables and their readers: an empty IcebergWriterCompatV1-compliant table, a plain deltalake table,
an id-mode table whose IcebergWriterCompatV1 is off (the enablement's input), a partitioned table with a checkpoint
and removes (the regeneration's input), and the log/row readers the tests check them with. Written with deltalake
or ``support.delta_log``, never with the code under test."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable as PeerTable
from deltalake import QueryBuilder, write_deltalake

from support import compat_tables as ct
from support.delta_log import latest_version, write_commit

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
    """Create an empty IcebergWriterCompatV1 table at ``path`` (a directory or a URI; version 0)."""
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
    write_commit(path, actions, read_version=None, operation="CREATE TABLE")
    return path


def write_plain_table(path: Path) -> Path:
    """Create a table with deltalake's defaults (no column mapping, no IcebergCompat features)."""
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    return path


def disable_writer_compat(path: Path) -> int:
    """Commit the next version of a table made by ``write_compliant_table`` with
    delta.enableIcebergWriterCompatV1=false (so the latest version is not compliant); returns that version."""
    version = latest_version(path)
    lines = (path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    (metadata,) = [json.loads(line)["metaData"] for line in lines if '"metaData"' in line]
    metadata["configuration"]["delta.enableIcebergWriterCompatV1"] = "false"
    return write_commit(path, [{"metaData": metadata}], read_version=version, operation="SET TBLPROPERTIES")


# -- id-mode tables for the enablement, and readers --------------------------------------------------

SCHEMA = [("id", "long"), ("tags", ct.array("string")), ("ts", "timestamp"), ("part", "string")]
COLUMNS: dict[str, list[Any]] = {"id": [1, 2, 3], "tags": [["a"], None, ["b", "c"]],
                                 "ts": [1_700_000_000_000_000, None, 0], "part": ["x", "y", "x"]}


def id_mode_table(path: Path, **add_files: Any) -> Path:
    """An id-mode table with col-<id> names, nested ids and IcebergCompatV2, but IcebergWriterCompatV1 off, and
    one commit of data files (``add_files`` options of compat_tables.add_files break one data requirement)."""
    table = ct.create_compliant_table(path, SCHEMA, partition_by=["part"],
                                      extra_properties={"delta.enableIcebergWriterCompatV1": None},
                                      protocol_overrides={"writerFeatures": ["columnMapping", "icebergCompatV2"]})
    ct.add_files(table, COLUMNS, **add_files)
    return path


def log_bytes(path: Path) -> dict[str, bytes]:
    """Every file of the table's _delta_log, by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted((path / "_delta_log").iterdir()) if p.is_file()}


def iceberg_files(path: Path) -> list[str]:
    """Every file under the table's _iceberg folder (none when it is absent), as sorted relative paths: what a
    refused conversion must leave as it was."""
    return sorted(p.relative_to(path).as_posix() for p in (path / "_iceberg").rglob("*") if p.is_file())


#: The schema metadata key of a conversion state file (``<manifest list>.state.arrow``) holding its JSON header.
STATE_KEY = b"deltaberg.conversion-state"


def newest_state_header(path: Path) -> dict[str, Any]:
    """The JSON header (Delta version, metaData, protocol) of the newest conversion state under the table."""
    newest = max((path / "_iceberg" / "metadata").glob("*.state.arrow"), key=lambda p: p.stat().st_mtime_ns)
    return json.loads(pa.ipc.open_file(pa.py_buffer(newest.read_bytes())).schema.metadata[STATE_KEY])


def rows_of(path: Path | str) -> list[dict[str, Any]]:
    """Every row as deltalake (DataFusion, which implements column mapping) reads it, in a canonical order."""
    data = pa.table(QueryBuilder().register("t", PeerTable(str(path))).execute("select * from t").read_all())
    return sorted(data.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def commit_lines(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def sample_rows(n: int = 6) -> pa.Table:
    """Rows with a partition-friendly string column, a nested list and struct, and nulls."""
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"n{i}" if i % 4 else None for i in range(n)], pa.string()),
        "part": pa.array(["a" if i % 2 else "b" for i in range(n)], pa.string()),
        "tags": pa.array([[f"t{i}", "x"] if i % 3 else None for i in range(n)], pa.list_(pa.string())),
        "point": pa.array([{"x": float(i), "y": -float(i)} for i in range(n)],
                          pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    })


def event_rows(first: int, count: int) -> pa.Table:
    """``count`` rows from id ``first``: a region and an int bucket to partition by (10 sorts before 2 as a string)."""
    ids = list(range(first, first + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": [f"name-{i}" for i in ids],
        "region": ["eu" if i % 3 else "us" for i in ids],
        "bucket": pa.array([i % 12 for i in ids], pa.int32()),
        "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
    })


def partitioned_events(path: Path) -> Path:
    """A deltalake table partitioned by region and bucket: two appends, a checkpoint at version 1, an append and a
    delete after it (removes of checkpoint files and of newer ones, adds of the rewritten files)."""
    write_deltalake(str(path), event_rows(0, 40), partition_by=["region", "bucket"])
    write_deltalake(str(path), event_rows(40, 40), mode="append")
    PeerTable(str(path)).create_checkpoint()
    write_deltalake(str(path), event_rows(80, 20), mode="append")
    PeerTable(str(path)).delete("id % 7 = 0")
    return path


class Appender:
    """Appends to deltalake tables through one kept DeltaTable per table, brought up to date before each write
    (commits made elsewhere meanwhile are read, not replayed): ``write_deltalake(path)`` opens the table and replays
    its log at every write, 2.5x the CPU over 110 one-row appends (4.5-5.2 against 1.9-2.0 s)."""

    def __init__(self) -> None:
        self._tables: dict[Path, PeerTable] = {}

    def __call__(self, path: Path, rows: pa.Table) -> None:
        table = self._tables.get(path)
        if table is None:
            write_deltalake(str(path), rows, mode="append")
            self._tables[path] = PeerTable(str(path))
        else:
            table.update_incremental()
            write_deltalake(table, rows, mode="append")
