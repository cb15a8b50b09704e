"""A decoder for stats JSON laid out alike row after row, as every Delta writer lays it out: keys, their order and
the punctuation repeat, only the values differ.

The first string of a batch is cut into a template: fixed text (keys, punctuation) and value slots, each slot typed by
the stats type's field at its key path. A compiled pass (numba) then checks every string against the template, byte
for byte on the fixed text and by a strict grammar in the slots (JSON integers within the field's range, JSON numbers,
strings without escapes, timestamps ``YYYY-MM-DDTHH:MM:SS[.ffffff][Z]``, true/false), and cuts the values out. The
values are converted by the same pyarrow converters as pyarrow's JSON reader (numbers and timestamps from their
text), so a string the template takes gives exactly the reader's row; the strings it does not take (another key set,
an escape, a bound that does not fit) are left to the reader. Without numba (the ``fast`` extra) nothing is
decoded here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.stats.stats_slots import BOOL, INT, NUM, SKIP, STR, TS

log = logging.getLogger(__name__)

#: numba is there (the ``fast`` extra) and not turned off (``DELTABERG_FAST_STATS=0``); without it every batch goes to
#: pyarrow's JSON reader.
NUMBA = importlib.util.find_spec("numba") is not None and os.environ.get("DELTABERG_FAST_STATS", "1") != "0"

_INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}
#: A batch is decoded here only when its first rows match the template this often; the rest go to the reader.
_PROBE_ROWS = 64
_PROBE_MATCHES = 0.5
#: Smaller batches go to the reader: the decoder's setup costs more than it saves on them.
MIN_ROWS = 8192
#: Stats text from which loading the compiled passes (numba's import and cached code: ~0.7 s of one core) pays
#: off: ~45k files of 20 columns' stats (a full conversion of 20k such files took 0.5 s longer with the decoder).
#: Until a caller warms the decoder up, only a batch this big loads it.
WORTH_BYTES = 64 * 2**20
#: Bytes of a Delta log's files with JSON stats (``DeltaTable.stats_text_bytes``) from which a full read warms the
#: decoder up: a Parquet checkpoint holds its stats JSON in about half the text's bytes.
WORTH_LOG_BYTES = WORTH_BYTES // 2


@dataclass(frozen=True)
class Slot:
    path: tuple[str, ...]
    kind: int
    type: pa.DataType | None  # the stats type's field (None for SKIP)


@dataclass(frozen=True)
class Template:
    """Fixed pieces and slots: piece ``i`` comes before slot ``i``; the last piece ends the string."""

    pieces: tuple[bytes, ...]
    slots: tuple[Slot, ...]
    objects: frozenset[tuple[str, ...]]  # key paths of the objects the template has (their structs are valid)


def available() -> bool:
    return NUMBA


def decode(strings: pa.StringArray, parse_type: pa.StructType) -> tuple[pa.StructArray, np.ndarray] | None:
    """The rows of ``strings`` (no nulls) that match the template of its first string, as ``parse_type`` (exactly
    what pyarrow's JSON reader gives for them), and their indices; None when there is no usable template."""
    if not NUMBA or len(strings) < MIN_ROWS:
        return None
    if not _warming.is_set():
        if _text_bytes(strings) < WORTH_BYTES:
            return None
        _warming.set()  # loaded for this batch: the next ones use it too
    if not _kernels_ready():
        return None
    return _decode(strings, parse_type)


def _offsets(strings: pa.StringArray) -> np.ndarray:
    """The string offsets of ``strings`` (its slice of the offsets buffer), into its data buffer."""
    return np.frombuffer(strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=strings.offset * 4)


def _text_bytes(strings: pa.StringArray) -> int:
    offsets = _offsets(strings)
    return int(offsets[-1] - offsets[0])


def _decode(strings: pa.StringArray, parse_type: pa.StructType) -> tuple[pa.StructArray, np.ndarray] | None:
    template = template_of(strings[0].as_py(), parse_type)
    if template is None:
        return None
    data_buffer = strings.buffers()[2]
    if data_buffer is None:
        return None
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    offsets = _offsets(strings)
    program = _Program(template)
    probe = min(len(strings), _PROBE_ROWS)
    spans, ints, ok = program.scan(data, offsets[: probe + 1])
    if ok.mean() < _PROBE_MATCHES:
        return None
    spans, ints, ok = program.scan(data, offsets)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return None
    try:
        columns = program.columns(data, spans, ints, rows)
    except pa.ArrowInvalid:  # a value the converters refuse (a 13th month): the reader decides about the batch
        return None
    keep = np.ones(len(rows), dtype=bool)
    for column in columns:
        if column is not None and pa.types.is_floating(column.type):
            # The reader refuses a number beyond the type (pyarrow's cast gives infinity): such rows go to it.
            keep &= np.asarray(pc.is_finite(column))
    if not keep.all():
        rows = rows[keep]
        if not len(rows):
            return None
        index = pa.array(np.flatnonzero(keep))
        columns = [None if c is None else c.take(index) for c in columns]
    by_path = {slot.path: column for slot, column in zip(template.slots, columns, strict=True) if column is not None}
    return _struct(parse_type, (), by_path, template, len(rows)), rows


def template_of(text: str, parse_type: pa.StructType) -> Template | None:
    """The template of one stats string, or None when it cannot be one (not an object of scalars and objects, a
    duplicate key, an array, a value whose JSON kind does not fit its field's type, a type not decoded here)."""
    try:
        tokens = list(_tokens(text))
    except ValueError:
        return None
    pieces: list[str] = []
    slots: list[Slot] = []
    objects: set[tuple[str, ...]] = set()
    fixed_start = 0
    for kind, path, start, end in tokens:
        if kind == "object":
            objects.add(path)
            if path and _field(parse_type, path) is not None and not pa.types.is_struct(_field(parse_type, path)):
                return None  # an object where the type has a value: the reader refuses the row
            continue
        field = _field(parse_type, path)
        if field is not None and pa.types.is_struct(field):
            return None  # a value where the type has an object
        if kind == "null":
            continue  # "null" stays in the fixed text: the field is null in every row the template takes
        slot_kind = SKIP if field is None else _slot_kind(field, kind)
        if slot_kind is None:
            return None
        pieces.append(text[fixed_start:start])
        slots.append(Slot(path, slot_kind, field))
        fixed_start = end
    pieces.append(text[fixed_start:])
    return Template(tuple(p.encode() for p in pieces), tuple(slots), frozenset(objects))


def _slot_kind(t: pa.DataType, token: str) -> int | None:
    if token == "number":
        if t in _INT_RANGES:
            return INT
        if pa.types.is_float32(t) or pa.types.is_float64(t):
            return NUM
        return None
    if token == "string":
        if pa.types.is_string(t):
            return STR
        if pa.types.is_timestamp(t) and t.unit == "us":
            return TS
        return None
    if token == "bool":
        return BOOL if pa.types.is_boolean(t) else None
    return None


def _field(t: pa.StructType, path: tuple[str, ...]) -> pa.DataType | None:
    for name in path:
        if not pa.types.is_struct(t):
            return None
        index = t.get_field_index(name)
        if index < 0:
            return None
        t = t.field(index).type
    return t


def _tokens(text: str) -> Iterator[tuple[str, tuple[str, ...], int, int]]:
    """(kind, key path, start, end) of each object and scalar value of a JSON object, in text order; raises
    ValueError for anything else (arrays, duplicate keys, text after the object, malformed JSON)."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if not text.startswith("{", pos):
        raise ValueError("not an object")
    end = yield from _object(text, pos, (), decoder)
    if _skip_ws(text, end) != len(text):
        raise ValueError("text after the object")


def _object(text: str, pos: int, path: tuple[str, ...], decoder: json.JSONDecoder):  # type: ignore[no-untyped-def]
    yield "object", path, pos, pos
    pos = _skip_ws(text, pos + 1)
    seen: set[str] = set()
    if text.startswith("}", pos):
        return pos + 1
    while True:
        if not text.startswith('"', pos):
            raise ValueError("a key expected")
        key, pos = json.decoder.scanstring(text, pos + 1)
        if key in seen:
            raise ValueError("duplicate key")
        seen.add(key)
        pos = _skip_ws(text, pos)
        if not text.startswith(":", pos):
            raise ValueError("':' expected")
        pos = _skip_ws(text, pos + 1)
        child = (*path, key)
        char = text[pos:pos + 1]
        if char == "{":
            pos = yield from _object(text, pos, child, decoder)
        elif char == "[":
            raise ValueError("arrays are not decoded here")
        else:
            value, end = decoder.raw_decode(text, pos)
            kind = ("null" if value is None else "bool" if isinstance(value, bool)
                    else "string" if isinstance(value, str) else "number")
            yield kind, child, pos, end
            pos = end
        pos = _skip_ws(text, pos)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
            continue
        if text.startswith("}", pos):
            return pos + 1
        raise ValueError("',' or '}' expected")


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _struct(t: pa.StructType, path: tuple[str, ...], columns: dict[tuple[str, ...], pa.Array], template: Template,
            n: int) -> pa.StructArray:
    children = []
    for f in t:
        child_path = (*path, f.name)
        if pa.types.is_struct(f.type):
            if child_path in template.objects:
                children.append(_struct(f.type, child_path, columns, template, n))
            else:
                children.append(pa.nulls(n, f.type))
        elif child_path in columns:
            children.append(columns[child_path])
        else:
            children.append(pa.nulls(n, f.type))
    return pa.StructArray.from_arrays(children, fields=list(t))


class _Program:
    """A template as the kernel's arrays."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self.fixed = np.frombuffer(b"".join(template.pieces), dtype=np.uint8)
        self.fixed_offsets = np.cumsum([0, *(len(p) for p in template.pieces)]).astype(np.int64)
        self.kinds = np.array([s.kind for s in template.slots], dtype=np.int8)
        lo, hi = [], []
        for s in template.slots:
            low, high = _INT_RANGES.get(s.type, (0, 0)) if s.kind == INT else (0, 0)
            lo.append(low)
            hi.append(high)
        self.lo = np.array(lo, dtype=np.int64)
        self.hi = np.array(hi, dtype=np.int64)

    def scan(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(offsets) - 1
        slots = len(self.kinds)
        # Row-major: a row's slots are written side by side (slot-major rows thrash the TLB).
        # Only the values of matching rows are read back, and the kernel sets all of those.
        spans = np.empty((n, slots, 2), dtype=np.int32)  # offsets into an Arrow string buffer
        ints = np.empty((n, slots), dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        kernels().scan(data, offsets.astype(np.int64), self.fixed, self.fixed_offsets, self.kinds, self.lo, self.hi,
                       spans, ints, ok)
        return spans, ints, ok

    def columns(self, data: np.ndarray, spans: np.ndarray, ints: np.ndarray, rows: np.ndarray) -> list[pa.Array | None]:
        text_slots = np.array([i for i, k in enumerate(self.kinds) if k in (NUM, STR)], dtype=np.int64)
        buffer, value_offsets = kernels().gather(data, spans, rows.astype(np.int64), text_slots)
        arrow_buffer = pa.py_buffer(buffer)
        out: list[pa.Array | None] = []
        text_index = {int(s): i for i, s in enumerate(text_slots)}
        # One pass turns the row-major values of the kept rows into a contiguous column per slot (a fancy-index
        # gather per slot costs several times that).
        by_slot = np.ascontiguousarray((ints if len(rows) == len(ints) else ints[rows]).T)
        for i, slot in enumerate(self.template.slots):
            if slot.kind == SKIP:
                out.append(None)
            elif slot.kind == INT:
                out.append(pa.array(by_slot[i]).cast(slot.type))
            elif slot.kind == TS:
                out.append(pa.array(by_slot[i], slot.type))
            elif slot.kind == BOOL:
                out.append(pa.array(by_slot[i].astype(bool)))
            else:
                offs = value_offsets[text_index[i]]
                text = pa.Array.from_buffers(pa.string(), len(rows), [None, pa.py_buffer(offs), arrow_buffer])
                out.append(text if slot.kind == STR else text.cast(slot.type))
        return out


def kernels() -> ModuleType:
    """The compiled passes, imported (and numba with them) on first use."""
    from airflow_deltaberg.core.delta.stats import stats_kernels

    return stats_kernels


def _kernels_ready() -> bool:
    """Whether the compiled passes load; if not (numba refuses to cache with no writable cache folder, a numba that
    does not fit this numpy, ...), the decoder stays off for the process and the reader parses everything."""
    global NUMBA
    try:
        kernels()
    except Exception as exc:  # noqa: BLE001 - any failure of a speed-up falls back to the reader
        log.warning("the compiled stats decoder cannot load (%s: %s); pyarrow's JSON reader parses the stats",
                    type(exc).__name__, exc)
        NUMBA = False
    return NUMBA


_warming = threading.Event()


def warm_up() -> None:
    """Get the compiled passes ready on a background thread (numba's import and the cached machine code, ~0.4 s on
    one core), for a caller about to parse many stats (``WORTH_BYTES`` or more): the work overlaps what it does
    meanwhile (loading the log), and batches of any size from ``MIN_ROWS`` on are decoded from then on."""
    if NUMBA and not _warming.is_set():
        _warming.set()
        threading.Thread(target=_load_kernels, name="stats-decoder-warm-up", daemon=True).start()


def _load_kernels() -> None:
    if not _kernels_ready():
        return
    # One tiny batch through decode loads each pass for the argument types decode gives it.
    strings = pa.array(['{"n":1,"s":"a"}'] * 2, pa.string())
    with contextlib.suppress(Exception):  # a failure here shows again, where it matters, on the real batch
        _decode(strings, pa.struct([("n", pa.int64()), ("s", pa.string())]))
