"""Avro binary encoding a column at a time: rows built from columns of parts.

Rows are built from parts, left to right. Short fixed-width parts (varints, union branch bytes, short byte
strings) are slots: columns of one (rows x bytes) matrix plus a per-row count of used bytes; consecutive slots
share the matrix and are compacted into one binary column with a boolean mask. Long or uneven parts (paths,
array items) stay Arrow binary columns. ``RowBuilder.finish`` joins the parts row by row with
``binary_join_element_wise``. No Python code runs per row: loops go over parts, varint byte positions or blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MAX_OFFSET = 2**31 - 1
_OWN_PART_WIDTH = 32  # bytes per row from which a run of full slots is not compacted with others


@dataclass(frozen=True)
class Slot:
    """``width`` bytes per row, of which row i uses the first ``lens[i]`` (None: all of them).

    ``fill(out, used)`` writes the bytes into ``out`` (rows x width); ``used`` is the matching used-byte mask,
    or None when every slot of the matrix is full.
    """

    width: int
    lens: np.ndarray | None
    fill: Callable[[np.ndarray, np.ndarray | None], None]
    same: np.ndarray | None = None  # the bytes of every row, when they are the same (a constant)


_UINTS = ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8))


def copy_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for (rows x bytes) uint8 arrays whose rows may be strided.

    numpy loops slowly over a few bytes per row, so rows move as one 8/4/2/1-byte integer per run.
    """
    width = dst.shape[1]
    if src.strides[1] != 1:
        src = np.ascontiguousarray(src)
    pos = 0
    for size, uint in _UINTS:
        while width - pos >= size:
            np.copyto(dst[:, pos : pos + size].view(uint), src[:, pos : pos + size].view(uint))
            pos += size


def matrix_slot(mat: np.ndarray) -> Slot:
    """A slot holding ``mat`` (rows x bytes, or 1 x bytes for the same bytes in every row)."""
    same = np.ascontiguousarray(mat[0]) if mat.shape[0] == 1 else None
    return Slot(mat.shape[1], None, lambda out, used: copy_rows(out, mat), same)


def _narrowest_uint(top: int) -> type[np.unsignedinteger]:
    for uint in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(uint).max:
            return uint
    return np.uint64


def zigzag(values: np.ndarray, nonnegative: bool = False) -> np.ndarray:
    """Avro's zig-zag mapping of signed ints to unsigned ones, in the narrowest unsigned dtype that holds them.

    ``nonnegative`` promises no value is negative (lengths, counts): the mapping is then a plain doubling.
    """
    v = np.asarray(values)
    if v.size == 0:
        return np.zeros(0, np.uint8)
    high = int(v.max())
    low = 0 if nonnegative else int(v.min())
    if low >= 0:
        # Narrow first, then double: fewer bytes through every later pass.
        z = v.astype(_narrowest_uint(2 * high))
        z <<= 1
        return z
    wide = v.astype(np.int64, copy=False)
    z64 = np.left_shift(wide, 1)
    np.bitwise_xor(z64, wide >> 63, out=z64)
    return z64.view(np.uint64).astype(_narrowest_uint(max(2 * high, -2 * low - 1)))


def varint_slot(z: np.ndarray) -> Slot:
    """Base-128 varints of unsigned values: low 7-bit group first, high bit set on all but the last byte."""
    n = len(z)
    top = int(z.max()) if n else 0
    width = max(1, (top.bit_length() + 6) // 7)
    if width == 1:
        return Slot(1, None, lambda out, used: np.copyto(out[:, 0], z, casting="unsafe"))
    lens: np.ndarray | None = np.ones(n, np.uint8)
    for k in range(1, width):
        lens += z >= z.dtype.type(1 << (7 * k))
    if int(lens.min()) == width:
        lens = None  # every value takes the full width: the slot needs no compaction

    def fill(out: np.ndarray, used: np.ndarray | None) -> None:
        for k in range(width):
            group = z >> z.dtype.type(7 * k) if k else z
            if k + 1 == width:
                np.copyto(out[:, k], group, casting="unsafe")  # the top group is below 0x80
                continue
            # A group >= 0x80 continues: its byte is the low 7 bits with the high bit set, and that byte is the
            # minimum of the two; a smaller group is its own byte.
            flagged = group & z.dtype.type(0x7F)
            flagged |= z.dtype.type(0x80)
            np.minimum(group, flagged, out=out[:, k], casting="unsafe")

    return Slot(width, lens, fill)


def encode_long(value: int) -> bytes:
    """One zig-zag varint, for headers and block framing."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """Offsets (n + 1, absolute into the data buffer) and the data buffer of a binary array."""
    if not pa.types.is_binary(arr.type):
        raise TypeError(f"expected binary, got {arr.type}")
    bufs = arr.buffers()
    n = len(arr)
    if bufs[1] is None:
        return np.zeros(n + 1, np.int32), pa.py_buffer(b"")
    offsets = np.frombuffer(bufs[1], np.int32, count=arr.offset + n + 1)[arr.offset :]
    return offsets, bufs[2] if bufs[2] is not None else pa.py_buffer(b"")


def binary_from_offsets(offsets: np.ndarray, data: pa.Buffer | np.ndarray) -> pa.BinaryArray:
    """A binary array over ``data`` whose value i is data[offsets[i]:offsets[i + 1]]."""
    if len(offsets) and int(offsets[-1]) > _MAX_OFFSET:
        raise OverflowError("encoded column exceeds 2 GiB: write fewer rows per chunk")
    offsets = np.ascontiguousarray(offsets, dtype=np.int32)
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(np.ascontiguousarray(data))
    return pa.BinaryArray.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), buf])


def compact(slots: list[Slot], n: int) -> pa.BinaryArray:
    """Concatenate the used bytes of each slot, row by row, into one binary column."""
    total = sum(s.width for s in slots)
    mat = np.empty((n, total), np.uint8)
    variable = any(s.lens is not None for s in slots)
    # Full slots need no mask writes: the mask starts all True and only per-row lengths clear bytes.
    used = np.ones((n, total), bool) if variable else None
    row_len = np.full(n, sum(s.width for s in slots if s.lens is None), np.int32)
    starts = np.cumsum([0, *(s.width for s in slots)])
    if any(s.same is not None for s in slots):
        # Constants go in as one row copied down the matrix: filling each constant's columns would touch every
        # row once per constant (a map's keys and branch bytes are many one-byte constants).
        template = np.zeros(total, np.uint8)
        for s, start in zip(slots, starts[:-1].tolist(), strict=True):
            if s.same is not None:
                template[start : start + s.width] = s.same
        mat[:] = template
    for s, start in zip(slots, starts[:-1].tolist(), strict=True):
        if used is not None and s.lens is not None:
            # Column by column: numpy broadcasts over a few bytes per row much slower than over rows.
            for k in range(s.width):
                np.greater(s.lens, k, out=used[:, start + k])
            row_len += s.lens
        if s.same is None:
            s.fill(mat[:, start : start + s.width], None if used is None else used[:, start : start + s.width])
    offsets = np.zeros(n + 1, np.int64)
    if used is None:
        np.multiply(np.arange(n + 1, dtype=np.int64), total, out=offsets)
        return binary_from_offsets(offsets, mat.reshape(-1))
    np.cumsum(row_len, out=offsets[1:])
    return binary_from_offsets(offsets, np.compress(used.reshape(-1), mat.reshape(-1)))


class RowBuilder:
    """Collects the encoded parts of ``n`` rows in order and joins them into one Avro value per row."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._slots: list[Slot] = []
        self._parts: list[pa.Array] = []

    def slot(self, slot: Slot, active: np.ndarray | None = None) -> None:
        """Add a slot; rows where ``active`` is False get none of its bytes."""
        if active is not None and active.all():
            active = None  # full slots need no mask when compacted
        if active is not None and not active.any():
            return  # no bytes in any row: a masked slot would make its neighbours' compaction masked too
        if active is not None:
            lens = slot.lens
            if lens is None:
                lens = np.full(self.n, slot.width, np.uint8 if slot.width < 256 else np.int32)
            slot = Slot(slot.width, np.where(active, lens, lens.dtype.type(0)), slot.fill, slot.same)
        self._slots.append(slot)

    def matrix(self, mat: np.ndarray, active: np.ndarray | None = None) -> None:
        """Fixed-width bytes (rows x width)."""
        self.slot(matrix_slot(mat), active)

    def const(self, data: bytes, active: np.ndarray | None = None) -> None:
        """The same bytes in every (active) row."""
        self.matrix(np.frombuffer(data, np.uint8)[None, :], active)

    def long(self, values: np.ndarray, active: np.ndarray | None = None, nonnegative: bool = False) -> None:
        """Avro int/long: zig-zag varints (``nonnegative``: the caller knows no value is negative)."""
        self.slot(varint_slot(zigzag(values, nonnegative)), active)

    def branch(self, valid: np.ndarray | None) -> None:
        """Union index of ["null", T]: 0 for null rows, 1 for valid ones (``None``: all valid)."""
        if valid is None:
            self.const(b"\x02")
        else:
            self.matrix((np.asarray(valid, bool).view(np.uint8) << np.uint8(1)).reshape(-1, 1))

    def body(self, arr: pa.Array) -> None:
        """A binary column taken as is (no nulls; one value per row)."""
        if arr.null_count:
            raise ValueError("body parts must not contain nulls")
        self._flush()
        self._parts.append(arr)

    def _flush(self) -> None:
        # A wide run of full slots becomes a part of its own: compacted together with variable slots, each of
        # its bytes would be masked and filtered; on its own it is one matrix, and the join copies it once.
        group: list[Slot] = []
        for full, run in groupby(self._slots, key=lambda s: s.lens is None):
            slots = list(run)
            if full and sum(s.width for s in slots) >= _OWN_PART_WIDTH:
                if group:
                    self._parts.append(compact(group, self.n))
                    group = []
                self._parts.append(compact(slots, self.n))
            else:
                group.extend(slots)
        if group:
            self._parts.append(compact(group, self.n))
        self._slots = []

    def finish(self) -> pa.BinaryArray:
        """One encoded value per row."""
        self._flush()
        if not self._parts:
            return binary_from_offsets(np.zeros(self.n + 1, np.int32), pa.py_buffer(b""))
        if len(self._parts) == 1:
            return self._parts[0]
        total = sum(_data_size(p) for p in self._parts)
        if total > _MAX_OFFSET:
            raise OverflowError("encoded rows exceed 2 GiB: write fewer rows per chunk")
        return pc.binary_join_element_wise(*self._parts, b"")


def _data_size(arr: pa.Array) -> int:
    offsets, _ = binary_parts(arr)
    return int(offsets[-1] - offsets[0]) if len(offsets) else 0
