"""Editing the footer of a Parquet file (its Thrift FileMetaData, compact protocol), to make files whose footer
says something their data does not: what a buggy or hostile writer leaves behind.

A generic compact-protocol codec rather than a library (docs/LIBRARIES.md): pyarrow cannot write a footer that
disagrees with the data (its writer computes the statistics); ``thrift`` needs Python generated from parquet.thrift
by the Thrift compiler, ``thriftpy2`` parquet.thrift vendored, and fastparquet (``cencoding.from_buffer``) would add
fastparquet, pandas and cramjam to the test extra for two test modules. Without a schema, every field a test does
not edit is written back as it was read."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# Field ids of parquet.thrift used here.
_FILE_ROW_GROUPS = 4
_ROW_GROUP_COLUMNS = 1
_CHUNK_META = 3
_META_PATH = 3
_META_STATISTICS = 12
_STATISTICS_NULL_COUNT = 3

Fields = list[list[Any]]  # [field id, type, value] in file order


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return out

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def value(self, kind: int) -> Any:
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8:self.pos])[0]
        if kind == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if kind in (_LIST, _SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if element in (_TRUE, _FALSE):
                return element, [self.byte() == 1 for _ in range(size)]
            return element, [self.value(element) for _ in range(size)]
        if kind == _STRUCT:
            return self.fields()
        raise ValueError(f"thrift type {kind} is not handled")

    def fields(self) -> Fields:
        out: Fields = []
        last = 0
        while True:
            head = self.byte()
            if head == _STOP:
                return out
            delta, kind = head >> 4, head & 0x0F
            field_id = last + delta if delta else self.zigzag()
            out.append([field_id, kind, self.value(kind)])
            last = field_id


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def _zigzag(v: int) -> bytes:
    return _varint((v << 1) ^ (v >> 63))


def _encode_value(kind: int, value: Any) -> bytes:
    if kind in (_TRUE, _FALSE):
        return b""
    if kind == _BYTE:
        return bytes([value])
    if kind in (_I16, _I32, _I64):
        return _zigzag(value)
    if kind == _DOUBLE:
        return struct.pack("<d", value)
    if kind == _BINARY:
        return _varint(len(value)) + value
    if kind in (_LIST, _SET):
        element, items = value
        size = len(items)
        head = bytes([(size << 4) | element]) if size < 15 else bytes([0xF0 | element]) + _varint(size)
        if element in (_TRUE, _FALSE):
            return head + bytes(1 if item else 2 for item in items)
        return head + b"".join(_encode_value(element, item) for item in items)
    if kind == _STRUCT:
        return _encode_fields(value)
    raise ValueError(f"thrift type {kind} is not handled")


def _encode_fields(fields: Fields) -> bytes:
    out = bytearray()
    last = 0
    for field_id, kind, value in fields:
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        if 0 < field_id - last <= 15:
            out.append(((field_id - last) << 4) | kind)
        else:
            out.append(kind)
            out += _zigzag(field_id)
        out += _encode_value(kind, value)
        last = field_id
    out.append(_STOP)
    return bytes(out)


def _field(fields: Fields, field_id: int) -> list[Any]:
    return next(f for f in fields if f[0] == field_id)


def set_null_count(path: Path, row_group: int, column: str, null_count: int) -> None:
    """Rewrite the footer of the Parquet file at ``path`` so that column ``column`` (a dotted leaf path, e.g.
    ``add.path``) of row group ``row_group`` states ``null_count`` nulls; the data pages stay as they are."""
    data = path.read_bytes()
    if data[-4:] != b"PAR1":
        raise ValueError(f"{path} is not a Parquet file")
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    meta = _Reader(data[start:len(data) - 8]).fields()
    chunks = _field(_field(meta, _FILE_ROW_GROUPS)[2][1][row_group], _ROW_GROUP_COLUMNS)[2][1]
    for chunk in chunks:
        column_meta = _field(chunk, _CHUNK_META)[2]
        if ".".join(p.decode() for p in _field(column_meta, _META_PATH)[2][1]) == column:
            _field(_field(column_meta, _META_STATISTICS)[2], _STATISTICS_NULL_COUNT)[2] = null_count
            break
    else:
        raise KeyError(f"no column {column} in row group {row_group} of {path}")
    footer = _encode_fields(meta)
    path.write_bytes(data[:start] + footer + struct.pack("<I", len(footer)) + b"PAR1")
