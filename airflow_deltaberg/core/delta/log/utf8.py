"""The log's strings are UTF-8: checked once, where a log file is read.

Delta's log is JSON (commits, JSON checkpoints) and Parquet (checkpoints, sidecars), whose strings are UTF-8. A
garbled byte, or a JSON escape of a lone surrogate (``"\\ud800"``: valid JSON syntax, but no character; pyarrow's
JSON reader turns it into bytes that are not UTF-8 and Python's into a string that cannot be encoded), would
otherwise travel into paths, stats and metadata and fail far away (UnicodeDecodeError, UnicodeEncodeError).
deltalake refuses both.

The common case costs little: ``bytes.isascii`` over a commit (no decoding unless a byte is not ASCII), a search
for a backslash, and where there is one (JSON stats) a search for the ``\\uD800``-``\\uDFFF`` escapes of
surrogates; only lines that hold one are parsed again. (On the 300k-file fixture: about 4 ms of a 0.3 s load.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow as pa

# A JSON escape of a UTF-16 surrogate (high D800-DBFF, low DC00-DFFF). Inside an escaped string (stats) it is
# preceded by a second backslash: the match still finds it, and the line is looked at.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")
# String fields of a file action that hold JSON themselves.
_NESTED_JSON = ("stats",)


def ndjson_utf8_problem(data: bytes) -> tuple[int, str] | None:
    """(1-based line number, what is wrong) for the first line of an NDJSON log file that is not UTF-8 or whose
    JSON holds a lone surrogate (in a string, a key, or the JSON of a stats string); None when all is well."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - _line_start(data, exc.start)
            return line, f"holds bytes that are not UTF-8 ({exc.reason} at byte {column} of the line)"
    if data.find(b"\\") < 0:  # memchr: most commits without stats hold no backslash at all
        return None
    starts = None
    checked: set[int] = set()
    for match in _SURROGATE_ESCAPE.finditer(data):
        if starts is None:
            starts = np.concatenate(([0], np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1))
        index = int(np.searchsorted(starts, match.start(), side="right")) - 1
        if index in checked:
            continue
        checked.add(index)
        end = data.find(b"\n", int(starts[index]))
        line = data[int(starts[index]) : end if end >= 0 else len(data)]
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue  # not JSON: the parser names the line
        if _holds_lone_surrogate(value):
            return index + 1, ("holds a JSON escape of a lone UTF-16 surrogate (such as \\ud800), which is no "
                               "character and cannot be UTF-8")
    return None


def _line_start(data: bytes, position: int) -> int:
    return data.rfind(b"\n", 0, position) + 1


def _holds_lone_surrogate(value: Any, key: str | None = None) -> bool:
    """Whether a parsed JSON value holds a lone surrogate: json.loads keeps an unpaired ``\\udXXX`` escape as that
    code point (a valid pair becomes one character)."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            return True
        if key in _NESTED_JSON and "\\u" in value:
            try:
                return _holds_lone_surrogate(json.loads(value))
            except (ValueError, RecursionError):
                return False  # stats that are not JSON: the stats parser names them
        return False
    if isinstance(value, dict):
        return any(_holds_lone_surrogate(k) or _holds_lone_surrogate(v, k) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_lone_surrogate(v) for v in value)
    return False


def arrow_utf8_problem(data: pa.Table | pa.RecordBatch | pa.Array) -> str | None:
    """What is wrong with the strings of an Arrow table, batch or array read from a Parquet log file (None: they
    are UTF-8). Parquet readers do not check the bytes of string columns; Arrow's full validation does."""
    try:
        data.validate(full=True)
    except pa.ArrowInvalid as exc:
        return f"holds a string that is not UTF-8 or is malformed ({' '.join(str(exc).split())})"
    return None
