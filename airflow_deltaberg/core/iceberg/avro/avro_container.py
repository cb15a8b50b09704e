"""The Avro object container file: ``AvroContainerWriter`` writes a header and blocks of already encoded rows;
``read_rows`` reads them back as bytes, the header's metadata and the blocks inflated and joined (the encoded rows
one after another, as ``AvroContainerWriter.write_rows`` took them).

Only the container is parsed, not the rows: a caller that knows where each row starts (the conversion state
does) cuts them out. Codecs ``null`` and ``deflate``, the ones ``AvroContainerWriter`` writes.
"""

from __future__ import annotations

import json
import os
import zlib
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from airflow_deltaberg.core.errors import AvroContainerError
from airflow_deltaberg.core.iceberg.avro.avro_encode import binary_parts, encode_long

try:
    from isal import isal_zlib
except ImportError:  # a platform without isal wheels: zlib reads and writes the same format, slower
    isal_zlib = None

_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) if isal_zlib is None else (zlib.error, isal_zlib.error)

MAGIC = b"Obj\x01"
CODECS = ("null", "deflate")
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


class _Writable(Protocol):
    def write(self, data: Any) -> Any: ...


def deflate(payload: bytes | memoryview, level: int) -> bytes:
    """Raw RFC 1951 deflate (no zlib header or checksum), as Avro's deflate codec stores blocks.

    ISA-L when installed (its levels are 0-3: higher zlib levels use its 3), else zlib.
    """
    if isal_zlib is not None:
        compressor = isal_zlib.compressobj(min(level, 3), isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
    else:
        compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(payload) + compressor.flush()


class AvroContainerWriter:
    """Writes an Avro object container file: header, then blocks of already encoded rows.

    With ``threads`` > 1, deflate runs on a thread pool (zlib releases the GIL) while the caller encodes the next
    rows; blocks are still written in order. ``close`` (or leaving the ``with`` block) writes what is pending;
    the stream itself is never closed here.
    """

    def __init__(
        self,
        stream: _Writable,
        schema: Mapping[str, Any] | str,
        metadata: Mapping[str, str | bytes] | None = None,
        *,
        codec: str = "null",
        compression_level: int = 1,
        sync_marker: bytes | None = None,
        threads: int = 1,
    ) -> None:
        if codec not in CODECS:
            raise ValueError(f"unsupported Avro codec {codec!r}; expected one of {CODECS}")
        self._stream = stream
        self.codec = codec
        self.compression_level = compression_level
        self.sync_marker = sync_marker if sync_marker is not None else os.urandom(16)
        if len(self.sync_marker) != 16:
            raise ValueError("the sync marker must be 16 bytes")
        self.bytes_written = 0
        self.rows_written = 0
        self._pool = ThreadPoolExecutor(threads) if codec == "deflate" and threads > 1 else None
        self._pending: deque[tuple[int, Future[bytes]]] = deque()
        self._max_pending = 2 * threads
        schema_json = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
        meta: dict[str, bytes] = {"avro.schema": schema_json.encode(), "avro.codec": codec.encode()}
        for key, value in (metadata or {}).items():
            meta[key] = value.encode() if isinstance(value, str) else bytes(value)
        header = bytearray(MAGIC)
        header += encode_long(len(meta))
        for key, value in meta.items():
            k = key.encode()
            header += encode_long(len(k)) + k + encode_long(len(value)) + value
        header += b"\x00" + self.sync_marker
        self._write(bytes(header))

    def __enter__(self) -> AvroContainerWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.close()
        elif self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def _write(self, data: bytes | memoryview) -> None:
        self._stream.write(data)
        self.bytes_written += len(data)

    def _write_block(self, count: int, payload: bytes | memoryview) -> None:
        self._write(encode_long(count) + encode_long(len(payload)))
        self._write(payload)
        self._write(self.sync_marker)

    def write_rows(self, rows: pa.Array, block_rows: int = 4096) -> None:
        """Write encoded rows (a binary array, one Avro value each) in blocks of at most ``block_rows``."""
        if block_rows < 1:
            raise ValueError("block_rows must be positive")
        offsets, data = binary_parts(rows)
        view = memoryview(data)
        n = len(rows)
        for start in range(0, n, block_rows):
            stop = min(start + block_rows, n)
            payload = view[int(offsets[start]) : int(offsets[stop])]
            if self._pool is not None:
                self._pending.append((stop - start, self._pool.submit(deflate, payload, self.compression_level)))
                while len(self._pending) > self._max_pending:
                    count, future = self._pending.popleft()
                    self._write_block(count, future.result())
            elif self.codec == "deflate":
                self._write_block(stop - start, deflate(payload, self.compression_level))
            else:
                self._write_block(stop - start, payload)
        self.rows_written += n

    def close(self) -> None:
        """Write the blocks still being compressed."""
        while self._pending:
            count, future = self._pending.popleft()
            self._write_block(count, future.result())
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
