"""Deletion vector helpers only tests use: Z85 encoding (the writer's side, kept apart from the module's decoder
so that a round trip checks one against the other), a DV's absolute path, and data file entries of a snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionSpec

from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import relative_dv_key
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.iceberg.data_files import entries_for_files
from airflow_deltaberg.core.iceberg.schema import ConvertedSchema
from airflow_deltaberg.core.storage import Storage

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    """Z85 text for ``data``, zero-padded to a multiple of 4 bytes (as Delta writes it; ZeroMQ RFC 32)."""
    padded = bytes(data) + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(padded), 4):
        value = int.from_bytes(padded[i:i + 4], "big")
        out.extend(Z85_ALPHABET[value // 85**power % 85] for power in range(4, -1, -1))
    return "".join(out)


def dv_location(table_root: str, descriptor: Mapping[str, Any]) -> str:
    """The protocol's absolutePath of an on-disk DV (``u``: below ``table_root``; ``p``: as logged)."""
    kind, value = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "u":
        return f"{table_root.rstrip('/')}/{relative_dv_key(value)}"
    if kind == "p":
        return value
    raise ValueError(f"a deletion vector of storage type {kind!r} has no file")


def data_file_entries(snapshot: Snapshot, converted: ConvertedSchema, spec: PartitionSpec, storage: Storage, *,
                      snapshot_id: int, sequence_number: int) -> pa.Table:
    """One ADDED manifest entry per live file of ``snapshot``."""
    return entries_for_files(snapshot.files, snapshot.metadata, converted, spec, storage, table=snapshot.table,
                             snapshot_id=snapshot_id, sequence_number=sequence_number)
