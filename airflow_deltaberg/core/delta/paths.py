"""Where the paths of a Delta log point: the one rule for data file and deletion vector paths.

A path in an add or remove action is a URI: relative to the table root (the usual case) or absolute (shallow
clones, ``s3://other-bucket/...``, ``file:///...``). A relative path is percent-decoded and its ``.`` and ``..``
segments are resolved as URI references are (RFC 3986 5.2.4, as Delta itself resolves them through Hadoop
paths); one that climbs above the table root is refused: readers would be sent to files that are not the
table's. Absolute paths stay allowed, and ``files_outside_table`` tells which of them lie outside the root.

The checks are column-wise: plain relative paths (no ``%``, no ``..``) cost one scan of the path bytes, and only
the few paths that need it are resolved in Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.errors import PathOutsideTableError

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


# -- relative paths that leave the table ---------------------------------------------------------------------


def _escaping_data_path(path: str) -> bool:
    if is_absolute(path):
        return False
    try:
        resolve_relative(path)
    except ValueError:
        return True
    return False


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


def _first_escape(files: pa.Table) -> tuple[int, str, str] | None:
    """(row, what, path) of the first row (in table order) whose relative path or DV path leaves the root."""
    found: list[tuple[int, str, str]] = []
    paths = files.column("path")
    for row in rows_holding(paths, ("%", "..")):
        path = paths[int(row)].as_py()
        if path is not None and _escaping_data_path(path):
            found.append((int(row), "path", path))
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
                    found.append((int(row), "deletion vector", f"{kind}{value}"))
                    break
    return min(found) if found else None


def refuse_paths_outside_table(files: pa.Table, table: str, source_file: Callable[[int], str]) -> None:
    """Raise PathOutsideTableError for the first add or remove (``files``: FILE_ACTIONS_SCHEMA rows) whose
    relative data path or deletion vector path resolves outside the table root; ``source_file(version)`` names
    the log file the action was read from."""
    if not files.num_rows:
        return
    escape = _first_escape(files)
    if escape is None:
        return
    row, what, path = escape
    version = files.column("version")[row].as_py()
    action = "add" if files.column("is_add")[row].as_py() else "remove"
    subject = "path" if what == "path" else "deletion vector"
    raise PathOutsideTableError(
        f"the {action} action's {subject} {path!r} resolves outside the table root; a relative path must stay "
        "below the table (readers would be sent to files that are not the table's)",
        table=table, version=version, file=source_file(version) if version is not None else None,
    )


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
