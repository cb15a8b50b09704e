"""What Iceberg readers of a conversion misread, said in the conversion summary (``ConversionResult.warnings``).

- Data files storing timestamps as INT64 TIMESTAMP_MILLIS (``core.delta.file_checks.timestamp_units``): Iceberg Java's
  row-group filter skips matching rows of such files. Finding them means reading footers, so what is read depends
  on the run: with ``verify_stats`` every converted file's footer is read anyway and every one is judged; with
  ``strict`` every converted file's footer is read and one such file refuses the conversion
  (MisreadDataFileError) before anything is written; otherwise ``SAMPLE_FILES`` footers of the files this run
  converts (the first and the newest) are read. A writer's timestamp unit is a setting of the writer, so a sample
  finds a table written so; ``validate --data-checks --sample-files all`` lists every file. Tables whose schema has
  no timestamp column read no footer here.
- Collated string columns (Delta's collations feature: ``__COLLATIONS`` in the field metadata, as Delta on Spark
  writes it: a map from the field's path, ``name``, ``name.element``, ``name.key``, ``name.value``, to the
  collation): Iceberg has no collations, so its readers compare such strings as bytes and filters, joins and sorts
  on them can give other rows than Delta's. Read from the schema: no cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_deltaberg.core.delta.file_checks.file_footer import data_file_location, read_file_footer
from airflow_deltaberg.core.delta.file_checks.timestamp_units import WHY, millis_columns
from airflow_deltaberg.core.delta.schema import COLLATIONS_KEY, ArrayType, DataType, MapType, PrimitiveType, StructType
from airflow_deltaberg.core.errors import DeltabergError, MisreadDataFileError
from airflow_deltaberg.core.storage import Storage

#: Footers read per run when neither ``verify_stats`` nor ``strict`` reads them all.
SAMPLE_FILES = 2
READERS = 8
_CONTEXT = "; nothing was converted"


@dataclass(frozen=True)
class MillisFile:
    """A data file with INT64 TIMESTAMP_MILLIS columns (their parquet paths)."""

    location: str
    columns: tuple[str, ...]
    version: int | None = None  # the Delta version that added it, where known


def has_timestamps(t: DataType) -> bool:
    """Whether a type holds a timestamp or timestamp_ntz anywhere."""
    if isinstance(t, PrimitiveType):
        return t.name in ("timestamp", "timestamp_ntz")
    if isinstance(t, StructType):
        return any(has_timestamps(f.type) for f in t.fields)
    if isinstance(t, ArrayType):
        return has_timestamps(t.element_type)
    if isinstance(t, MapType):
        return has_timestamps(t.key_type) or has_timestamps(t.value_type)
    return False


def millis_file(storage: Storage, path: str, table: str, version: int | None = None, *,
                sampled: bool = False) -> MillisFile | None:
    """The data file at ``path`` (as the log names it) as a MillisFile when it has INT64 TIMESTAMP_MILLIS columns
    (reads its footer). A ``sampled`` file that cannot be read is None: the sample only looks for a warning, and
    the conversion, which does not read footers, refuses what it must itself (``strict`` raises the typed error)."""
    try:
        location = data_file_location(storage, path)
        footer = read_file_footer(storage, location, table=table, context=_CONTEXT)
    except DeltabergError:
        if sampled:
            return None
        raise
    columns = millis_columns(footer.metadata)
    return MillisFile(location, tuple(columns), version) if columns else None


def millis_warnings(storage: Storage, files: pa.Table, schemas: Iterable[StructType], *, table: str, version: int,
                    strict: bool, verified: Sequence[MillisFile] | None = None) -> list[str]:
    """The warning about the converted ``files`` (``path``, and ``version`` where known) that store timestamps in
    milliseconds; under ``strict`` a MisreadDataFileError for the first instead. ``verified``: what
    ``verify_stats`` found reading every footer (nothing more is read). ``version``: the Delta version converted."""
    if verified is not None:
        found, checked, every = list(verified), files.num_rows, True
    elif not files.num_rows or not any(has_timestamps(s) for s in schemas):
        return []
    else:
        every = strict
        rows = np.arange(files.num_rows) if every else \
            np.unique(np.linspace(0, files.num_rows - 1, num=min(files.num_rows, SAMPLE_FILES)).astype(np.int64))
        picked = files.take(pa.array(rows))
        paths = picked.column("path").to_pylist()
        versions = picked.column("version").to_pylist() if "version" in picked.column_names else [None] * len(rows)
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            read = pool.map(lambda path, ver: millis_file(storage, path, table, ver, sampled=not every), paths,
                            versions)
            found = [f for f in read if f is not None]
        checked = len(rows)
    if not found:
        return []
    first = found[0]
    if strict:
        raise MisreadDataFileError(
            f"the data file stores column(s) {', '.join(first.columns)} as INT64 TIMESTAMP_MILLIS ({len(found)} of "
            f"the {checked} file(s) checked do); {WHY}. Rewrite them with microsecond timestamps, or convert "
            f"without strict (a warning){_CONTEXT}",
            table=table, version=first.version if first.version is not None else version, file=first.location)
    which = "checked" if every else "sampled"
    return [f"{len(found)} of the {checked} data file(s) {which} store timestamps as INT64 TIMESTAMP_MILLIS (first: "
            f"{first.location}, column(s) {', '.join(first.columns)}); {WHY}. Rewrite them with microsecond "
            "timestamps; validate --data-checks --sample-files all lists them, convert --strict refuses them"]


def collated_columns(schema: StructType) -> list[tuple[str, str]]:
    """(column path, collation) of every collated string in ``schema`` (``__COLLATIONS`` field metadata)."""
    found = []
    for path, f in schema.walk():
        collations = f.metadata.get(COLLATIONS_KEY)
        if isinstance(collations, dict):
            # Keys start with the field's own name: the path is the parent's path plus the key.
            found += [(".".join((*path[:-1], str(key))), str(value)) for key, value in collations.items()]
        elif collations is not None:
            found.append((".".join(path), str(collations)))
    return found


def collation_warnings(schema: StructType) -> list[str]:
    """The warning naming the collated string columns of ``schema`` and their collations (none: empty)."""
    columns = collated_columns(schema)
    if not columns:
        return []
    listed = ", ".join(f"{path} ({collation})" for path, collation in columns)
    return [f"collated string column(s) {listed} become plain Iceberg strings: Iceberg has no collations, so its "
            "readers compare them byte by byte, and filters, joins and sorts on them may give other rows than "
            "Delta's"]
