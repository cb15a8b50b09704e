"""Where the paths of a Delta log point: the one rule for data file and deletion vector paths.

A path in an add or remove action is a URI: relative to the table root (the usual case) or absolute (shallow
clones, ``s3://other-bucket/...``, ``file:///...``). A relative path is percent-decoded and its ``.`` and ``..``
segments are resolved as URI references are (RFC 3986 5.2.4, as Delta itself resolves them through Hadoop
paths); one that climbs above the table root is refused: readers would be sent to files that are not the
table's. Absolute paths stay allowed, and ``files_outside_table`` tells which of them lie outside the root.

A data path must name a data file: an empty one, one that resolves to the table root or a folder, and one with a
query or fragment (a raw '?' or '#', which a writer percent-encodes in a file name) are refused
(data_path_problem says why for each).

Two identities: the reconciliation key is the path as logged (Delta on Spark, for relative paths, and deltalake
compare the strings: ``part%2D1`` and ``part-1`` are two logical files to them), while ``data_file_identities``
tells which data file a path names (decoded, dot segments resolved, an absolute URI inside the table as its
relative part), so that one file live under two spellings can be refused.

The checks are column-wise: plain relative paths (no '%', no dot segment, no scheme, query or fragment) cost a
few scans of the path bytes (scan_paths), and only the few paths that need it are resolved in Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.errors import CorruptLogError, PathOutsideTableError

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: The last characters of a ``u`` deletion vector: its Z85-encoded uuid (whose alphabet has '.', '/' and '%').
DV_UUID_CHARS = 20
#: Schemes that name the same store: a location under one is inside a root under the other.
_SCHEME_FAMILY = {"file": "", "local": "", "s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs", "wasbs": "wasb"}
EXAMPLES = 5


def is_absolute(path: str) -> bool:
    """Whether a log path (as logged, URI-encoded) is absolute: it has a scheme or starts with '/'."""
    return path.startswith("/") or _SCHEME.match(path) is not None


def _remove_dot_segments(path: str, *, clamp: bool) -> str | None:
    """``path`` without '.' and '..' segments; None when a '..' climbs above the start (unless ``clamp``)."""
    out: list[str] = []
    for segment in path.split("/"):
        if segment == ".":
            continue
        if segment == "..":
            if out and not (clamp and out == [""]):
                out.pop()
            elif not clamp:
                return None
            continue
        out.append(segment)
    return "/".join(out)


def resolve_relative(path: str) -> str:
    """The key below the table root of a relative log path: percent-decoded, dot segments resolved.

    Raises ValueError when the path resolves outside the table root.
    """
    key = _remove_dot_segments(unquote(path), clamp=False)
    if key is None:
        raise ValueError(f"the path {path!r} resolves outside the table root")
    return key


def relative_dv_prefix(prefix: str) -> str:
    """The folder below the table root of a ``u`` deletion vector's prefix, dot segments resolved (the prefix is
    not percent-decoded: it is used as it is). Raises ValueError when it, or its decoded form, leaves the root."""
    resolve_relative(prefix)  # the decoded form must stay inside too
    key = _remove_dot_segments(prefix, clamp=False)
    if key is None:
        raise ValueError(f"the deletion vector prefix {prefix!r} resolves outside the table root")
    return key


# -- column-wise scans ----------------------------------------------------------------------------------------


def _chunks(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(arr.chunks) if isinstance(arr, pa.ChunkedArray) else [arr]


def _bytes_of(chunk: pa.Array) -> np.ndarray | None:
    """The bytes of a string chunk's values (exactly its slice of the data buffer), or None for other types."""
    if pa.types.is_string(chunk.type):
        width = np.dtype(np.int32)
    elif pa.types.is_large_string(chunk.type):
        width = np.dtype(np.int64)
    else:
        return None
    _, offsets, data = chunk.buffers()[:3]
    if data is None or len(chunk) == 0:
        return np.empty(0, np.uint8)
    bounds = np.frombuffer(offsets, width, count=len(chunk) + 1, offset=chunk.offset * width.itemsize)
    return np.frombuffer(data, np.uint8)[int(bounds[0]) : int(bounds[-1])]


def _may_hold(chunk: pa.Array, needles: tuple[str, ...]) -> bool:
    """Whether any value of ``chunk`` may hold one of ``needles`` (one or two ASCII characters each): one pass
    over its bytes; a False is exact, a True may be a match across two values."""
    raw = _bytes_of(chunk)
    if raw is None:
        return True
    for needle in needles:
        first = raw == ord(needle[0])
        if len(needle) == 1:
            if first.any():
                return True
            continue
        pairs = first[:-1]
        pairs &= raw[1:] == ord(needle[1])
        if pairs.any():
            return True
    return False


def rows_holding(arr: pa.Array | pa.ChunkedArray, needles: tuple[str, ...]) -> np.ndarray:
    """Positions (ascending) of the values of ``arr`` that contain one of ``needles`` (1-2 ASCII chars each)."""
    found: list[np.ndarray] = []
    start = 0
    for chunk in _chunks(arr):
        if len(chunk) and _may_hold(chunk, needles):
            hit = pc.match_substring(chunk, needles[0])
            for needle in needles[1:]:
                hit = pc.or_(hit, pc.match_substring(chunk, needle))
            found.append(np.flatnonzero(np.asarray(hit.fill_null(False))) + start)
        start += len(chunk)
    return np.concatenate(found) if found else np.empty(0, np.int64)


# -- the identity of a path -----------------------------------------------------------------------------------

_HEX_VALUE = np.full(256, -1, dtype=np.int16)
for _digit, _char in enumerate(b"0123456789abcdef"):
    _HEX_VALUE[_char] = _digit
    _HEX_VALUE[bytes([_char]).upper()[0]] = _digit


def _percent_decoded(chunk: pa.Array) -> pa.Array:
    """A string chunk as binary with every ``%XX`` escape decoded (as ``unquote_to_bytes`` does, value by
    value), column-wise: the escapes are found and replaced in the chunk's data buffer."""
    as_binary = chunk.cast(pa.binary())
    raw = _bytes_of(chunk)
    if raw is None or not len(raw):
        return as_binary
    width = np.dtype(np.int64) if pa.types.is_large_string(chunk.type) else np.dtype(np.int32)
    bounds = np.frombuffer(chunk.buffers()[1], width, count=len(chunk) + 1, offset=chunk.offset * width.itemsize)
    offsets = bounds.astype(np.int64) - int(bounds[0])
    marks = np.flatnonzero(raw == ord("%"))
    # An escape is '%' and two hex digits inside the same value (the value's end is the next offset above it).
    ends = offsets[np.searchsorted(offsets, marks, side="right")] if len(marks) else marks
    marks = marks[marks + 2 < ends]
    high = _HEX_VALUE[raw[marks + 1]]
    low = _HEX_VALUE[raw[marks + 2]]
    valid = (high >= 0) & (low >= 0)
    marks, high, low = marks[valid], high[valid], low[valid]
    if not len(marks):
        return as_binary
    data = raw.copy()
    data[marks] = (high * 16 + low).astype(np.uint8)
    keep = np.ones(len(raw), dtype=bool)
    keep[marks + 1] = False
    keep[marks + 2] = False
    # Each escape drops two bytes of its value: a value starts earlier by two per escape of the values before it.
    per_value = np.bincount(np.searchsorted(offsets[1:], marks, side="right"), minlength=len(chunk)) * 2
    new_offsets = offsets - np.concatenate(([0], np.cumsum(per_value)))
    validity = None
    if chunk.null_count:
        validity = pa.array(np.asarray(chunk.is_valid())).buffers()[1]
    return pa.Array.from_buffers(pa.large_binary(), len(chunk),
                                 [validity, pa.py_buffer(new_offsets), pa.py_buffer(data[keep])],
                                 null_count=chunk.null_count).cast(pa.binary())


def path_keys(paths: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """Each log path with every percent-escape decoded, as binary (a ``%XX`` may decode to bytes that are not
    UTF-8). Only chunks holding '%' are decoded; the others are their own bytes."""
    chunks = []
    for chunk in _chunks(paths):
        if len(chunk) and _may_hold(chunk, ("%",)):
            chunks.append(_percent_decoded(chunk))
        else:
            chunks.append(chunk.cast(pa.binary()))
    return pa.chunked_array(chunks, type=pa.binary())


@dataclass(frozen=True)
class PathScan:
    """What one pass over the bytes of a path column found: the rows that need more than a byte comparison."""

    percent: np.ndarray  # rows holding '%' (their decoded bytes differ from the logged ones)
    unusual: np.ndarray  # rows that may be absolute, empty, a folder, hold dot segments, a query or a fragment

    def of_rows(self, mask: np.ndarray) -> PathScan:
        """The scan of the column's rows where ``mask`` is true (renumbered: the filtered column's scan)."""
        position = np.cumsum(mask) - 1
        return PathScan(position[self.percent[mask[self.percent]]], position[self.unusual[mask[self.unusual]]])


_DOT, _SLASH = ord("."), ord("/")
# Rare bytes that make a path unusual: a scheme's ':', a query or fragment. An encoded dot or slash ("%2E",
# "%2F", any case), which decodes to a dot segment or a folder, is looked for where '%' occurs.
_RARE = (b":", b"?", b"#")


def _positions(raw: np.ndarray, needle: bytes) -> np.ndarray:
    """Start positions of ``needle`` (1-3 bytes) in ``raw``."""
    hit = raw[: len(raw) - len(needle) + 1] == needle[0]
    for i, byte in enumerate(needle[1:], start=1):
        hit &= raw[i : len(raw) - len(needle) + 1 + i] == byte
    return np.flatnonzero(hit)


def _scan_chunk(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(rows holding '%', unusual rows) of one string chunk; see scan_paths."""
    raw = _bytes_of(chunk)
    n = len(chunk)
    if raw is None:  # not a string column: every row goes the careful way
        return np.arange(n), np.arange(n)
    width = np.dtype(np.int64) if pa.types.is_large_string(chunk.type) else np.dtype(np.int32)
    bounds = np.frombuffer(chunk.buffers()[1], width, count=n + 1, offset=chunk.offset * width.itemsize)
    offsets = bounds.astype(np.int64) - int(bounds[0])
    nonempty = offsets[1:] > offsets[:-1]
    # Per row: empty (a null is empty too, and not refused here: a missing path is refused where it is read),
    # starting with '/' or '.', ending with '/' or '.'.
    flags = ~nonempty
    if chunk.null_count:
        flags &= np.asarray(chunk.is_valid())
    if len(raw):
        first = raw[np.minimum(offsets[:-1], len(raw) - 1)]
        last = raw[np.maximum(offsets[1:] - 1, 0)]
        flags |= nonempty & ((first == _SLASH) | (first == _DOT) | (last == _SLASH) | (last == _DOT))
    # The rare bytes: a substring search (memchr) tells whether numpy needs to find them at all. Dot segments
    # ("/." and ".."): where a dot follows a dot or a slash. A match across two values costs a false candidate.
    # Rows are marked in a mask (positions come in order, rows may repeat).
    data = raw.tobytes()
    ends = offsets[1:]
    unusual = flags

    def mark(positions: np.ndarray, mask: np.ndarray) -> None:
        mask[np.searchsorted(ends, positions, side="right")] = True

    for needle in _RARE:
        if needle in data:
            mark(_positions(raw, needle), unusual)
    percent = np.zeros(n, dtype=bool)
    if b"%" in data:
        marks = _positions(raw, b"%")
        mark(marks, percent)
        marks = marks[marks + 2 < len(raw)]
        encoded = (raw[marks + 1] == ord("2")) & np.isin(raw[marks + 2] | 0x20, (ord("e"), ord("f")))
        if encoded.any():
            mark(marks[encoded], unusual)
    if len(raw) > 1:
        dot = raw == _DOT
        after = dot[1:]
        after &= dot[:-1] | (raw[:-1] == _SLASH)
        if after.any():
            mark(np.flatnonzero(after), unusual)
    return np.flatnonzero(percent), np.flatnonzero(unusual)


def scan_paths(paths: pa.Array | pa.ChunkedArray) -> PathScan:
    """One pass over the bytes of a column of log paths: which rows hold '%' and which are unusual (may be
    absolute, empty, name a folder, hold dot segments, a query or a fragment, once decoded). A plain relative
    path (the common case: ``part=1/part-0001.parquet``) is neither, and needs no Python."""
    percent, unusual = [], []
    start = 0
    for chunk in _chunks(paths):
        if len(chunk):
            p, u = _scan_chunk(chunk)
            percent.append(p + start)
            unusual.append(u + start)
        start += len(chunk)
    empty = np.empty(0, np.int64)
    return PathScan(np.concatenate(percent) if percent else empty, np.concatenate(unusual) if unusual else empty)


def _identity_of(path: str, root: str) -> bytes:
    """The data file a log path names, for the rare paths that are absolute or hold dot segments."""
    if not is_absolute(path):
        try:
            return resolve_relative(path).encode()
        except ValueError:
            return unquote(path).encode()  # refused by refuse_invalid_paths
    family, netloc, where = _normalized(path, decode=True)
    root_family, root_netloc, root_path = _normalized(root, decode=False)
    if (family, netloc) == (root_family, root_netloc) and where.startswith(root_path + "/"):
        return where[len(root_path) + 1 :].encode()  # inside the table: the same key as its relative path
    return f"{family}://{netloc}{where}".encode()


def data_file_identities(paths: pa.Array | pa.ChunkedArray, root: str,
                         scan: PathScan | None = None) -> pa.Array | None:
    """Which data file each log path names (``root``: the table location), as binary keys that are equal for two
    spellings of one file: ``part%2D1`` and ``part-1`` (the same URI, RFC 3986 6.2.2), ``./part-1``, or an
    absolute URI inside the table. None when every path is a plain relative one without '%' (its own key).
    Rows holding only '%' are decoded column-wise; only the unusual ones are resolved in Python."""
    scan = scan or scan_paths(paths)
    if not len(scan.percent) and not len(scan.unusual):
        return None
    keys = path_keys(paths).combine_chunks()
    if len(scan.unusual):
        mask = np.zeros(len(keys), dtype=bool)
        mask[scan.unusual] = True
        fixed = [None if p is None else _identity_of(p, root)
                 for p in paths.take(pa.array(scan.unusual)).to_pylist()]
        keys = pc.replace_with_mask(keys, pa.array(mask), pa.array(fixed, pa.binary()))
    return keys


def _dv_fields(files: pa.Table) -> tuple[pa.Array, pa.Array] | None:
    """(storageType, pathOrInlineDv) of the rows' deletion vectors, or None when no row has one."""
    if "deletionVector" not in files.column_names:
        return None
    dv = files.column("deletionVector")
    if dv.null_count == len(dv):
        return None
    dv = dv.combine_chunks() if isinstance(dv, pa.ChunkedArray) else dv
    return pc.struct_field(dv, "storageType"), pc.struct_field(dv, "pathOrInlineDv")


def _dv_path_part(kind: str | None, value: str) -> str | None:
    """The part of a deletion vector's pathOrInlineDv that is a path: a ``u`` DV's prefix, a ``p`` DV's whole
    value, nothing of an inline one."""
    if kind == "u":
        return value[:-DV_UUID_CHARS]
    if kind == "p":
        return value
    return None


# -- data paths that name no file of the table, and deletion vector paths that leave it ---------------------------


def data_path_problem(path: str) -> tuple[type[CorruptLogError], str] | None:
    """What is wrong with a log path of a data file (as logged), as (error class, the end of a sentence starting
    "the path"), or None.

    - A relative path that resolves outside the table root: readers would be sent to files that are not the
      table's (PathOutsideTableError).
    - An empty path, or one that resolves to the table root or a folder (``.``, ``a/..``, ``x/``): it names no
      data file; a conversion would list the table folder as one.
    - A query or a fragment (a raw '?' or '#'). The readers disagree on what it means: Delta on Spark resolves
      the path with Hadoop's ``new Path(tablePath, new Path(new URI(path)))``, whose resolved URI keeps the
      scheme, authority, path and fragment but drops the query, and then opens the URI's path only; deltalake
      strips both; a reconciliation that compares the logged strings sees ``x?a=1`` and ``x`` as two files. A
      writer percent-encodes a '?' or '#' that is part of a file name (``%3F``, ``%23``; Delta's writers go
      through ``Path.toUri``), so a raw one is refused rather than guessed at. The same holds for absolute paths:
      a presigned or versioned URL (``?versionId=``) is not a data file path Iceberg readers could use.
    """
    if path == "":
        return CorruptLogError, "is empty: it names the table folder, not a data file"
    if "?" in path or "#" in path:
        return CorruptLogError, ("holds a query or fragment ('?' or '#'); a '?' or '#' of a file name must be "
                                 "percent-encoded (%3F, %23) in the log")
    # A last segment that is empty, '.' or '..' names a folder (RFC 3986 5.2.4 resolves "a/." to "a/").
    names_folder = unquote(path).rsplit("/", 1)[-1] in ("", ".", "..")
    if is_absolute(path):
        return (CorruptLogError, "names a folder, not a data file") if names_folder else None
    try:
        key = resolve_relative(path)
    except ValueError:
        return PathOutsideTableError, ("resolves outside the table root; a relative path must stay below the table "
                                       "(readers would be sent to files that are not the table's)")
    if names_folder or key == "":
        return CorruptLogError, "resolves to the table folder or to a folder in it: it is not a data file"
    return None


def _escaping_dv(kind: str | None, value: str) -> bool:
    part = _dv_path_part(kind, value)
    if part is None or (kind == "p" and is_absolute(part)):
        return False
    try:
        if kind == "u":
            relative_dv_prefix(part)
        else:
            resolve_relative(part)
    except ValueError:
        return True
    return False


def _first_problem(files: pa.Table, scan: PathScan) -> tuple[int, str, str, type[CorruptLogError], str] | None:
    """(row, subject, value, error class, problem) of the first row (in table order) whose data path names no
    file of the table (data_path_problem) or whose deletion vector path leaves the root."""
    found: list[tuple[int, str, str, type[CorruptLogError], str]] = []
    paths = files.column("path")
    # A '%' row is unusual when its decoded form may be (an encoded dot or slash): only unusual rows are looked at.
    for row in scan.unusual.tolist():
        path = paths[row].as_py()
        problem = data_path_problem(path) if path is not None else None
        if problem is not None:
            found.append((row, "path", path, *problem))
            break
    fields = _dv_fields(files)
    if fields is not None:
        kinds, values = fields
        on_disk = pc.fill_null(pc.is_in(kinds, pa.array(["u", "p"])), False)
        if pc.any(on_disk).as_py():
            part = pc.if_else(pc.equal(kinds, "u"), pc.utf8_slice_codeunits(values, 0, -DV_UUID_CHARS), values)
            part = pc.if_else(on_disk, part, pa.scalar(None, pa.string()))
            for row in rows_holding(part, ("%", "..")):
                kind, value = kinds[int(row)].as_py(), values[int(row)].as_py()
                if value is not None and _escaping_dv(kind, value):
                    found.append((int(row), "deletion vector", f"{kind}{value}", PathOutsideTableError,
                                  "resolves outside the table root; a relative path must stay below the table "
                                  "(readers would be sent to files that are not the table's)"))
                    break
    return min(found, key=lambda item: item[0]) if found else None


def refuse_invalid_paths(files: pa.Table, table: str, source_file: Callable[[int], str],
                         scan: PathScan | None = None) -> None:
    """Raise for the first add or remove (``files``: FILE_CHANGES_SCHEMA rows) whose data path names no file of
    the table (data_path_problem: PathOutsideTableError for a relative path outside the root, CorruptLogError
    otherwise) or whose deletion vector path resolves outside the root; ``source_file(version)`` names the log
    file the action was read from; ``scan``: scan_paths of the path column, when known. Costs one pass over the
    path bytes when every path is a plain relative one."""
    if not files.num_rows:
        return
    problem = _first_problem(files, scan or scan_paths(files.column("path")))
    if problem is None:
        return
    row, subject, path, error, text = problem
    version = files.column("version")[row].as_py()
    action = "add" if files.column("is_add")[row].as_py() else "remove"
    raise error(f"the {action} action's {subject} {path!r} {text}",
                table=table, version=version, file=source_file(version) if version is not None else None)


# -- absolute paths outside the root --------------------------------------------------------------------------


def _normalized(location: str, *, decode: bool) -> tuple[str, str, str]:
    """(scheme family, authority, path without dot segments or trailing '/') of a location."""
    if not _SCHEME.match(location):
        family, netloc, path = "", "", location
    else:
        parts = urlsplit(location)
        family = _SCHEME_FAMILY.get(parts.scheme.lower(), parts.scheme.lower())
        netloc, path = parts.netloc.lower(), parts.path
        if family == "" and netloc == "localhost":
            netloc = ""
    if decode:
        path = unquote(path)
    resolved = _remove_dot_segments(path, clamp=True) or ""
    return family, netloc, resolved.rstrip("/")


def is_outside_root(path: str, root: str) -> bool:
    """Whether an absolute log path (URI-encoded) names a file outside the table root ``root`` (a location)."""
    family, netloc, where = _normalized(path, decode=True)
    root_family, root_netloc, root_path = _normalized(root, decode=False)
    if (family, netloc) != (root_family, root_netloc):
        return True
    return not (where == root_path or where.startswith(root_path + "/"))


def _inside_prefixes(root: str) -> list[str]:
    """Plain spellings of locations inside ``root`` (a location without dot segments): absolute paths that start
    with one of them and hold no '%' or '..' are inside without further ado."""
    family, netloc, path = _normalized(root, decode=False)
    if family == "":
        return [f"{path}/", f"file:{path}/", f"file://{path}/", f"file://localhost{path}/"]
    schemes = [s for s, f in _SCHEME_FAMILY.items() if f == family] + [family]
    return [f"{scheme}://{netloc}{path}/" for scheme in schemes]


@dataclass(frozen=True)
class OutsideFiles:
    """Data files and deletion vector files of a file list that lie outside the table root."""

    data_files: int
    deletion_vectors: int
    examples: tuple[str, ...]  # the first few, data files first

    @property
    def count(self) -> int:
        return self.data_files + self.deletion_vectors


def _absolute_outside(values: pa.Array | pa.ChunkedArray, root: str) -> Iterator[str]:
    """The absolute values (log paths) that lie outside ``root``, in order."""
    candidates = np.union1d(rows_holding(values, (":",)), np.flatnonzero(
        np.asarray(pc.fill_null(pc.starts_with(values, "/"), False))))
    if not len(candidates):
        return
    subset = values.take(pa.array(candidates))
    inside = pa.array(np.zeros(len(subset), dtype=bool))
    for prefix in _inside_prefixes(root):
        inside = pc.or_(inside, pc.starts_with(subset, prefix))
    plain = pc.invert(pc.or_(pc.match_substring(subset, "%"), pc.match_substring(subset, "..")))
    settled = np.asarray(pc.fill_null(pc.and_(inside, plain), True))
    for value, known_inside in zip(subset.to_pylist(), settled, strict=True):
        if not known_inside and value is not None and is_absolute(value) and is_outside_root(value, root):
            yield value


def files_outside_table(files: pa.Table, root: str) -> OutsideFiles:
    """The absolute data file and ``p`` deletion vector paths of ``files`` (add rows: path, deletionVector) that
    lie outside the table root ``root``. Relative paths never do: those that would are refused on load."""
    data = list(_absolute_outside(files.column("path"), root)) if files.num_rows else []
    dvs: list[str] = []
    fields = _dv_fields(files) if files.num_rows else None
    if fields is not None:
        kinds, values = fields
        absolute_dvs = values.filter(pc.fill_null(pc.equal(kinds, "p"), False))
        dvs = list(_absolute_outside(absolute_dvs, root))
    examples = (data[:EXAMPLES] + dvs[:EXAMPLES])[:EXAMPLES]
    return OutsideFiles(len(data), len(dvs), tuple(examples))

