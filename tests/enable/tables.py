"""Tables and readers shared by the enable tests (import as ``enable.tables``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from compat import tables as ct
from deltalake import DeltaTable as PeerTable
from deltalake import QueryBuilder

SCHEMA = [("id", "long"), ("tags", ct.array("string")), ("ts", "timestamp"), ("part", "string")]
COLUMNS: dict[str, list[Any]] = {"id": [1, 2, 3], "tags": [["a"], None, ["b", "c"]],
                                 "ts": [1_700_000_000_000_000, None, 0], "part": ["x", "y", "x"]}


def id_mode_table(path: Path, **add_files: Any) -> Path:
    """An id-mode table with col-<id> names, nested ids and IcebergCompatV2, but IcebergWriterCompatV1 off, and
    one commit of data files (``add_files`` options of compat.tables.add_files break one data requirement)."""
    table = ct.create_compliant_table(path, SCHEMA, partition_by=["part"],
                                      extra_properties={"delta.enableIcebergWriterCompatV1": None},
                                      protocol_overrides={"writerFeatures": ["columnMapping", "icebergCompatV2"]})
    ct.add_files(table, COLUMNS, **add_files)
    return path


def log_bytes(path: Path) -> dict[str, bytes]:
    """Every file of the table's _delta_log, by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted((path / "_delta_log").iterdir()) if p.is_file()}


def rows_of(path: Path | str) -> list[dict[str, Any]]:
    """Every row as deltalake (DataFusion, which implements column mapping) reads it, in a canonical order."""
    data = pa.table(QueryBuilder().register("t", PeerTable(str(path))).execute("select * from t").read_all())
    return sorted(data.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def commit_lines(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]
