"""The manifests a conversion wrote, read back with fastavro and compared entry by entry (in process against the
Spark manifest engine, the spark-submit application or another conversion)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq


def _local(location: str) -> str:
    return location[len("file:"):] if location.startswith("file:") else location


def _relative(value: Any, root: str) -> Any:
    """``value`` with the table root taken off every location in it (the two copies live in different folders)."""
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, root) for v in value]
    if isinstance(value, bytes) and value.startswith(root.encode()):  # a bound of a position delete's file_path
        return _relative(value.decode(), root)
    if isinstance(value, str):
        local = _local(value)
        return local[len(root) + 1:] if local.startswith(root + "/") else value
    return value


def _delete_file(data_file: dict[str, Any], root: str, fs: Any = None) -> dict[str, Any]:
    """A delete file's entry as both copies can agree on: its name (derived from the data file's location) and
    size left out, the positions of a position delete file read in."""
    location = data_file.pop("file_path")
    data_file.pop("file_size_in_bytes")
    data_file.pop("column_sizes", None)
    if location.endswith(".parquet"):
        rows = pq.read_table(_local(location), filesystem=fs)
        data_file["positions"] = list(zip(_relative(rows.column("file_path").to_pylist(), root),
                                          rows.column("pos").to_pylist(), strict=True))
    return data_file


def _open(location: str, fs: Any = None) -> Any:
    return open(_local(location), "rb") if fs is None else fs.open(location, "rb")


def _avro(location: str, fs: Any = None) -> list[dict[str, Any]]:
    with _open(location, fs) as handle:
        return list(fastavro.reader(handle))


def written_manifests(metadata_location: str, root: Path | str, fs: Any = None) -> list[dict[str, Any]]:
    """The current snapshot's manifests in manifest-list order, each its list row (location left out: the names
    are fresh per attempt) and its entries in file order, locations relative to ``root``. ``fs``: the fsspec
    filesystem of a table on an object store (``root`` its URI); local files without it."""
    with _open(metadata_location, fs) as handle:
        metadata = json.loads(handle.read())
    current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    manifests = []
    for row in _avro(current["manifest-list"], fs):
        entries = _avro(row.pop("manifest_path"), fs)
        row.pop("manifest_length")  # the delete files' names (and so the manifests) differ in length
        for entry in entries:
            data_file = entry["data_file"]
            if data_file["content"] == 0:  # only its location names the table (a walk of every value is slow)
                data_file["file_path"] = _relative(data_file["file_path"], str(root))
            else:
                entry["data_file"] = _relative(_delete_file(data_file, str(root), fs), str(root))
        manifests.append({"list_row": row, "entries": entries})
    return manifests


def assert_same_manifests(in_process: list[dict[str, Any]], by_spark: list[dict[str, Any]]) -> None:
    assert [len(m["entries"]) for m in by_spark] == [len(m["entries"]) for m in in_process], "grouping differs"
    for i, (mine, theirs) in enumerate(zip(in_process, by_spark, strict=True)):
        assert theirs["list_row"] == mine["list_row"], f"manifest {i}"
        for j, (entry, other) in enumerate(zip(mine["entries"], theirs["entries"], strict=True)):
            assert other == entry, f"manifest {i} entry {j}"
