"""Reading back the rows of an Avro object container file as bytes: the header's metadata, and the blocks
inflated and joined (the encoded rows one after another, as ``AvroContainerWriter.write_rows`` took them).

Only the container is parsed, not the rows: a caller that knows where each row starts (the conversion state
does) cuts them out. Codecs ``null`` and ``deflate``, the ones ``AvroContainerWriter`` writes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from airflow_deltaberg.core.errors import AvroContainerError
from airflow_deltaberg.core.iceberg.avro.avro_encode import MAGIC

try:
    from isal import isal_zlib
except ImportError:  # a platform without isal wheels: zlib reads the same format, slower
    isal_zlib = None

_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) if isal_zlib is None else (zlib.error, isal_zlib.error)

SYNC_SIZE = 16


@dataclass(frozen=True)
class AvroRows:
    """The metadata of a container file, and its rows' bytes joined (``count`` rows in all)."""

    metadata: dict[str, bytes]
    count: int
    payload: bytes


def _read_long(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: the value and the position after it."""
    shift = result = 0
    while True:
        if pos >= len(data):
            raise AvroContainerError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise AvroContainerError("varint longer than 10 bytes")


def _read_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    size, pos = _read_long(data, pos)
    if size < 0 or pos + size > len(data):
        raise AvroContainerError("truncated bytes value")
    return bytes(data[pos:pos + size]), pos + size


def _read_metadata(data: memoryview, pos: int) -> tuple[dict[str, bytes], int]:
    metadata: dict[str, bytes] = {}
    while True:
        count, pos = _read_long(data, pos)
        if count == 0:
            return metadata, pos
        if count < 0:  # a block with its byte size after the count
            count = -count
            _, pos = _read_long(data, pos)
        for _ in range(count):
            key, pos = _read_bytes(data, pos)
            metadata[key.decode()], pos = _read_bytes(data, pos)


def _inflate(block: memoryview) -> bytes:
    if isal_zlib is not None:
        return isal_zlib.decompress(block, wbits=-isal_zlib.MAX_WBITS)
    return zlib.decompress(block, wbits=-zlib.MAX_WBITS)


def read_rows(data: bytes) -> AvroRows:
    """The rows of the container file ``data``; AvroContainerError when it is malformed (a wrong magic or sync
    marker, a truncated block, an unknown codec)."""
    view = memoryview(data)
    if bytes(view[:4]) != MAGIC:
        raise AvroContainerError("not an Avro object container file")
    metadata, pos = _read_metadata(view, 4)
    sync = bytes(view[pos:pos + SYNC_SIZE])
    pos += SYNC_SIZE
    codec = metadata.get("avro.codec", b"null").decode()
    if codec not in ("null", "deflate"):
        raise AvroContainerError(f"unsupported codec {codec!r}")
    blocks: list[bytes | memoryview] = []
    count = 0
    while pos < len(view):
        rows, pos = _read_long(view, pos)
        size, pos = _read_long(view, pos)
        if rows < 0 or size < 0 or pos + size + SYNC_SIZE > len(view):
            raise AvroContainerError("truncated block")
        block = view[pos:pos + size]
        pos += size
        if bytes(view[pos:pos + SYNC_SIZE]) != sync:
            raise AvroContainerError("a block does not end with the file's sync marker")
        pos += SYNC_SIZE
        try:
            blocks.append(_inflate(block) if codec == "deflate" else block)
        except _INFLATE_ERRORS as exc:
            raise AvroContainerError(f"a block does not inflate: {exc}") from exc
        count += rows
    return AvroRows(metadata, count, b"".join(blocks))
