"""Delta deletion vectors -> Iceberg v3 deletion vectors: ``deletion-vector-v1`` blobs in Puffin files, and
their delete-manifest entries.

One Puffin file per data file with a DV, named from the data file location and the DV's uniqueId (as the v2
position delete files are), so an unchanged DV keeps its file across conversions and a re-run converges. The
blob holds the same 64-bit Roaring bitmap Delta stores ("portable" format behind the magic ``D1 D3 39 64``,
framed by a big-endian length and CRC-32); it is rebuilt from the decoded positions, which also checks them.

References: Puffin spec (file layout, footer, ``deletion-vector-v1``: properties ``referenced-data-file`` and
``cardinality``, ``snapshot-id`` and ``sequence-number`` -1, no compression); table spec v3 "Deletion Vectors"
(content 1, format PUFFIN, ``referenced_data_file``, ``content_offset`` / ``content_size_in_bytes`` of the blob,
``record_count`` its cardinality; at most one DV per data file).
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from airflow_deltaberg.core.delta.file_checks.file_tables import dv_unique_id
from airflow_deltaberg.core.errors import DeleteFileMismatchError
from airflow_deltaberg.core.iceberg.deletes.position_deletes import added_delete_entries, write_per_deletion_vector
from airflow_deltaberg.core.iceberg.publish import METADATA_DIR
from airflow_deltaberg.core.storage import Storage

PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])
BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483545  # the reserved _pos column the vector indexes
#: Part of every Puffin file's name: change it when the written content changes, so no old file is reused.
NAME_VERSION = "deltaberg-deletion-vector-v1"
BLOB_OFFSET = len(PUFFIN_MAGIC)  # one blob per file, right after the header magic


@dataclass(frozen=True)
class _Written:
    key: str
    cardinality: int
    blob_length: int
    size: int


def deletion_vector_key(data_file_path: str, descriptor: Mapping[str, Any], key_prefix: str = METADATA_DIR) -> str:
    """The deterministic key of the Puffin file holding the DV of one data file location."""
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"{NAME_VERSION}:{data_file_path}:{dv_unique_id(descriptor)}")
    return f"{key_prefix}/{name}-dv.puffin"


def dv_blob(positions: np.ndarray) -> bytes:
    """A ``deletion-vector-v1`` blob for ascending row positions (uint64)."""
    positions = np.asarray(positions, np.uint64)
    high = (positions >> np.uint64(32)).astype(np.uint32)
    low = (positions & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    keys, starts = np.unique(high, return_index=True)
    ends = [*starts[1:], len(positions)]
    parts = [DV_MAGIC, struct.pack("<Q", len(keys))]
    for key, start, end in zip(keys, starts, ends, strict=True):
        bitmap = BitMap(low[start:end])
        bitmap.run_optimize()  # run containers where they are smaller, as Delta's and Iceberg's writers do
        parts += [struct.pack("<I", int(key)), bitmap.serialize()]
    vector = b"".join(parts)
    return struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))


def puffin_file(blob: bytes, referenced_data_file: str, cardinality: int) -> bytes:
    """A Puffin file holding one deletion vector blob."""
    footer = {
        "blobs": [{
            "type": BLOB_TYPE,
            "fields": [ROW_POSITION_FIELD_ID],
            "snapshot-id": -1,
            "sequence-number": -1,
            "offset": BLOB_OFFSET,
            "length": len(blob),
            "properties": {"referenced-data-file": referenced_data_file, "cardinality": str(cardinality)},
        }],
        "properties": {"created-by": "airflow-deltaberg"},
    }
    payload = json.dumps(footer, separators=(",", ":")).encode()
    return PUFFIN_MAGIC + blob + PUFFIN_MAGIC + payload + struct.pack("<i", len(payload)) + bytes(4) + PUFFIN_MAGIC


def _write_one(storage: Storage, key: str, data_file_path: str, positions: np.ndarray) -> _Written:
    """Write the Puffin file at ``key``, or reuse the one a previous run wrote there (same name, same bytes)."""
    blob = dv_blob(positions)
    data = puffin_file(blob, data_file_path, len(positions))
    if storage.exists(key):
        if storage.read(key) != data:
            raise DeleteFileMismatchError(
                f"{storage.uri(key)} does not hold the deletion vector of {data_file_path} this conversion derives; "
                "remove the file and convert again"
            )
    else:
        storage.replace(key, data)  # a concurrent run writing the same name writes the same bytes
    return _Written(key, len(positions), len(blob), len(data))


def _entries(files: pa.Table, rows: np.ndarray, written: list[_Written], storage: Storage, snapshot_id: int,
             sequence_number: int) -> pa.Table:
    n = len(written)
    columns = added_delete_entries(files, rows, [w.key for w in written], storage, file_format="PUFFIN",
                                   snapshot_id=snapshot_id, sequence_number=sequence_number)
    columns.update({
        "record_count": pa.array([w.cardinality for w in written], pa.int64()),
        "file_size_in_bytes": pa.array([w.size for w in written], pa.int64()),
        "referenced_data_file": files.column("file_path").take(pa.array(rows, pa.int64())).combine_chunks()
        .cast(pa.string()),
        "content_offset": pa.array(np.full(n, BLOB_OFFSET, np.int64)),
        "content_size_in_bytes": pa.array([w.blob_length for w in written], pa.int64()),
    })
    return pa.table(columns)


def write_deletion_vectors(
    storage: Storage,
    files: pa.Table,
    *,
    sequence_number: int,
    snapshot_id: int,
    key_prefix: str = METADATA_DIR,
    threads: int = 8,
) -> pa.Table:
    """Write a Puffin deletion vector for every row of ``files`` with a Delta deletion vector; return their
    entries. Same contract as ``position_deletes.write_position_deletes`` (columns ``file_path``,
    ``deletionVector``, optionally ``partition`` and ``record_count``), for v3 tables: ADDED content=1 entries
    with format PUFFIN, in the order of ``files``."""
    kept, written = write_per_deletion_vector(
        storage, files, lambda path, descriptor: deletion_vector_key(path, descriptor, key_prefix), _write_one,
        threads)
    return _entries(files, kept, written, storage, snapshot_id, sequence_number)
