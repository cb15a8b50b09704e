"""Delta deletion vectors: a descriptor -> the ascending row indexes it deletes (numpy uint64).

References: Delta protocol "Deletion Vectors" (descriptor fields, derived uniqueId and absolutePath),
"Deletion Vector Format" (RoaringBitmapArray) and "Deletion Vector File Storage Format": a version byte 1,
then per DV a big-endian int32 size, the bitmap, and the big-endian CRC-32 of the bitmap. A descriptor's
``offset`` is where its size field starts.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np

from airflow_deltaberg.core.delta.deletion_vectors.roaring import decode_roaring_bitmap_array
from airflow_deltaberg.core.delta.deletion_vectors.z85 import z85_decode, z85_uuid
from airflow_deltaberg.core.delta.file_checks.file_tables import dv_unique_id
from airflow_deltaberg.core.delta.paths import (
    DV_UUID_CHARS,
    is_absolute,
    is_outside_root,
    relative_dv_prefix,
    resolve_relative,
)
from airflow_deltaberg.core.errors import CorruptLogError, PathOutsideTableError, RoaringFormatError, StorageError
from airflow_deltaberg.core.storage import Storage, open_storage

FILE_FORMAT_VERSION = 1
UUID_CHARS = DV_UUID_CHARS
STORAGE_TYPES = ("u", "i", "p")


def relative_dv_key(path_or_inline_dv: str) -> str:
    """The key below the table root of a ``u`` DV: ``[<prefix>/]deletion_vector_<uuid>.bin``.

    Raises ValueError when the prefix leaves the table root or the uuid is not Z85.
    """
    prefix, encoded = path_or_inline_dv[:-UUID_CHARS], path_or_inline_dv[-UUID_CHARS:]
    name = f"deletion_vector_{z85_uuid(encoded)}.bin"
    folder = relative_dv_prefix(prefix).strip("/") if prefix else ""
    return f"{folder}/{name}" if folder else name


def _open_table(table: Storage | str, storage_options: Mapping[str, Any] | None) -> Storage:
    return table if isinstance(table, Storage) else open_storage(table, storage_options)


def _file_of(
    table: Storage, descriptor: Mapping[str, Any], storage_options: Mapping[str, Any] | None
) -> tuple[Storage, str]:
    """The storage and key of an on-disk DV's file (a relative one: below the table root, or refused)."""
    kind, value = descriptor["storageType"], descriptor["pathOrInlineDv"]
    relative = value[:-UUID_CHARS] if kind == "u" else None if is_absolute(value) else value
    if relative:
        try:
            if kind == "u":
                relative_dv_prefix(relative)
            else:
                resolve_relative(relative)
        except ValueError as exc:
            raise PathOutsideTableError(f"deletion vector {dv_unique_id(descriptor)!r} resolves outside the table "
                                        "root", table=table.root) from exc
    if kind == "u":
        try:
            return table, relative_dv_key(value)
        except ValueError as exc:
            raise CorruptLogError(f"deletion vector id {value!r} is not Z85: {exc}", table=table.root) from exc
    if relative is not None:
        return table, resolve_relative(value)  # not absolute after all: relative to the table, as add paths are
    location = unquote(value)  # logged like add paths: a URI
    parts = urlsplit(location)
    if parts.scheme == "file":
        location = parts.path
    root = table.root.rstrip("/")
    if location.startswith(f"{root}/") and not is_outside_root(value, table.root):
        return table, location[len(root) + 1 :]
    parent, name = location.rsplit("/", 1)
    return open_storage(parent or "/", storage_options), name


def _checked_descriptor(table: Storage, descriptor: Mapping[str, Any]) -> None:
    kind = descriptor.get("storageType")
    if kind not in STORAGE_TYPES:
        raise CorruptLogError(f"deletion vector storage type {kind!r} is not one of u, i, p", table=table.root)
    for name in ("pathOrInlineDv", "sizeInBytes", "cardinality"):
        if descriptor.get(name) is None:
            raise CorruptLogError(f"deletion vector {descriptor!r} lacks {name}", table=table.root)
    if descriptor["sizeInBytes"] < 0 or descriptor["cardinality"] < 0:
        raise CorruptLogError(f"deletion vector {descriptor!r} has a negative size or cardinality", table=table.root)
    if kind == "u" and len(descriptor["pathOrInlineDv"]) < UUID_CHARS:
        raise CorruptLogError(f"deletion vector id {descriptor['pathOrInlineDv']!r} is too short", table=table.root)
    if kind != "i" and descriptor.get("offset") is None:
        raise CorruptLogError(f"on-disk deletion vector {descriptor!r} has no offset", table=table.root)


def _decode(data: bytes, descriptor: Mapping[str, Any], table: Storage, where: str | None) -> np.ndarray:
    try:
        values = decode_roaring_bitmap_array(data)
    except RoaringFormatError as exc:
        raise CorruptLogError(f"deletion vector {dv_unique_id(descriptor)} is not a valid bitmap: {exc}",
                              table=table.root, file=where) from exc
    if len(values) != descriptor["cardinality"]:
        raise CorruptLogError(
            f"deletion vector {dv_unique_id(descriptor)} holds {len(values)} rows, its descriptor says "
            f"{descriptor['cardinality']}", table=table.root, file=where)
    return values


def _inline(table: Storage, descriptor: Mapping[str, Any]) -> np.ndarray:
    size = descriptor["sizeInBytes"]
    try:
        raw = z85_decode(descriptor["pathOrInlineDv"])
    except ValueError as exc:
        raise CorruptLogError(f"inline deletion vector is not Z85: {exc}", table=table.root) from exc
    if len(raw) < size:
        raise CorruptLogError(f"inline deletion vector has {len(raw)} bytes, its descriptor says {size}",
                              table=table.root)
    return _decode(raw[:size], descriptor, table, None)


def _read_at(handle: Any, offset: int, size: int, file_size: int, table: Storage, where: str) -> bytes:
    if offset < 0 or offset + size > file_size:
        raise CorruptLogError(f"deletion vector file is truncated: needs bytes {offset}..{offset + size}, "
                              f"has {file_size}", table=table.root, file=where)
    return handle.read_at(size, offset)


def _from_file(storage: Storage, key: str, descriptors: list[Mapping[str, Any]], table: Storage) -> list[np.ndarray]:
    """The DVs ``descriptors`` stored in one file, checking its version byte and each checksum."""
    where = storage.uri(key)
    fs, path = storage.arrow_path(key)
    try:
        with fs.open_input_file(path) as handle:
            return _read_dvs(handle, descriptors, table, where)
    except FileNotFoundError as exc:
        raise CorruptLogError("deletion vector file is missing", table=table.root, file=where) from exc
    except OSError as exc:
        raise StorageError(f"cannot read {where}: {exc}") from exc


def _read_dvs(handle: Any, descriptors: list[Mapping[str, Any]], table: Storage, where: str) -> list[np.ndarray]:
    file_size = handle.size()
    if _read_at(handle, 0, 1, file_size, table, where)[0] != FILE_FORMAT_VERSION:
        # Never the byte itself: the file may be anything a log names (a p DV is an absolute path).
        raise CorruptLogError("is not a deletion vector file (bad version byte)", table=table.root, file=where)
    out = []
    for descriptor in descriptors:
        offset, size = descriptor["offset"], descriptor["sizeInBytes"]
        chunk = _read_at(handle, offset, size + 8, file_size, table, where)
        stored_size = int.from_bytes(chunk[:4], "big", signed=True)
        if stored_size != size:
            raise CorruptLogError(f"deletion vector at offset {offset} is {stored_size} bytes, its descriptor "
                                  f"says {size}", table=table.root, file=where)
        data = chunk[4 : 4 + size]
        if zlib.crc32(data) != int.from_bytes(chunk[4 + size :], "big"):
            raise CorruptLogError(f"deletion vector at offset {offset} fails its CRC-32 checksum",
                                  table=table.root, file=where)
        out.append(_decode(data, descriptor, table, where))
    return out


def read_deletion_vectors(
    table: Storage | str,
    descriptors: Sequence[Mapping[str, Any]],
    *,
    storage_options: Mapping[str, Any] | None = None,
    threads: int = 8,
) -> list[np.ndarray]:
    """The deleted row indexes (ascending uint64) of each descriptor, in order.

    ``table`` is the Delta table's Storage or root location; descriptors are deletionVector structs as dicts
    (storageType, pathOrInlineDv, offset, sizeInBytes, cardinality). Each DV file is opened once; files are
    read on up to ``threads`` threads. Raises CorruptLogError naming the table and the DV file when a file is
    missing or truncated, a checksum or size does not match, or a bitmap is invalid or not of its cardinality.
    """
    storage = _open_table(table, storage_options)
    results: list[np.ndarray] = [np.empty(0, np.uint64)] * len(descriptors)
    by_file: dict[str, tuple[Storage, str, list[int]]] = {}
    for i, descriptor in enumerate(descriptors):
        _checked_descriptor(storage, descriptor)
        if descriptor["storageType"] == "i":
            results[i] = _inline(storage, descriptor)
            continue
        file_storage, key = _file_of(storage, descriptor, storage_options)
        by_file.setdefault(file_storage.uri(key), (file_storage, key, []))[2].append(i)

    def read(group: tuple[Storage, str, list[int]]) -> None:
        file_storage, key, rows = group
        for row, values in zip(rows, _from_file(file_storage, key, [descriptors[r] for r in rows], storage),
                               strict=True):
            results[row] = values

    if len(by_file) <= 1 or threads <= 1:
        for group in by_file.values():
            read(group)
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(by_file))) as pool:
            list(pool.map(read, by_file.values()))
    return results


def read_deletion_vector(
    table: Storage | str, descriptor: Mapping[str, Any], *, storage_options: Mapping[str, Any] | None = None
) -> np.ndarray:
    """The deleted row indexes (ascending uint64) of one DV of the Delta table at ``table`` (Storage or root)."""
    return read_deletion_vectors(table, [descriptor], storage_options=storage_options, threads=1)[0]
