"""The parquet footer of a data file the Delta log names, with the file's size: what the checks that compare a
file with its add action read (``footer_stats``, ``file_types``: validate's data checks, ``convert
--verify-stats``), and what the converter reads for a row count the stats lack.

A file below the table root is read through the table's storage; one elsewhere (an absolute path, as a shallow
clone logs it) through a storage opened at its folder with the table's storage options. Every failure is a typed
error naming the table and the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_deltaberg.core.delta.file_checks.bounded_read import column_slices
from airflow_deltaberg.core.delta.file_checks.footer_check import footer_problem
from airflow_deltaberg.core.delta.paths import is_absolute, resolve_relative
from airflow_deltaberg.core.errors import (
    CorruptDataFileError,
    DeltabergError,
    DeltaError,
    MissingDataFileError,
    PathOutsideTableError,
    StorageError,
)
from airflow_deltaberg.core.redact import location_text
from airflow_deltaberg.core.storage import Storage


@dataclass(frozen=True)
class FileFooter:
    """A data file's parquet metadata and size; its column values are read only when asked for."""

    table: str
    location: str  # the file's full location
    metadata: pq.FileMetaData
    size: int  # bytes, as storage reported them when the file was opened for its footer (no request of its own)
    filesystem: pafs.FileSystem
    path: str  # in ``filesystem``

    @cached_property
    def schema_arrow(self) -> pa.Schema:
        return self.metadata.schema.to_arrow_schema()

    @property
    def schema(self) -> pq.ParquetSchema:
        return self.metadata.schema

    def read_columns(self, names: Sequence[str]) -> Iterator[pa.Table]:
        """The values of the top-level columns ``names`` (for what the footer's statistics cannot answer), in row
        order, in slices bounded by the data checks' memory budget (``bounded_read``; DataCheckMemoryError beyond
        it)."""
        with _typed_errors(self.table, self.location):
            with self.filesystem.open_input_file(self.path) as f:
                yield from column_slices(f, self.metadata, names, table=self.table, location=self.location)


def data_file_location(storage: Storage, path: str) -> str:
    """The full location of a data file from its path in the log (URI-encoded; relative to the table root, or
    absolute). A relative path that resolves outside the table root raises PathOutsideTableError."""
    if is_absolute(path):
        return unquote(path)
    try:
        return storage.uri(resolve_relative(path))
    except ValueError as exc:
        raise PathOutsideTableError(f"the data file path {path!r} resolves outside the table root",
                                    table=storage.root) from exc


def data_file_storage(storage: Storage, location: str) -> tuple[Storage, str]:
    """The storage and key of a data file at a full ``location`` (as ``data_file_locations`` gives it)."""
    root = storage.root.rstrip("/")
    if location.startswith(f"{root}/"):
        return storage, location[len(root) + 1 :]
    parent, name = location.rsplit("/", 1)
    return storage.open_other(parent or "/"), name


def read_file_footer(storage: Storage, location: str, *, table: str, context: str = "") -> FileFooter:
    """The footer and size of the data file at ``location`` (only the footer is read). ``context`` ends the
    message of a MissingDataFileError (what the file was read for)."""
    with _typed_errors(table, location, context):
        where, key = data_file_storage(storage, location)
        fs, path = where.arrow_path(key)
        with fs.open_input_file(path) as f:
            size = f.size()
            metadata = pq.ParquetFile(f).metadata
        problem = footer_problem(metadata)
        if problem is not None:
            raise CorruptDataFileError(f"the data file {problem}", table=table, file=location)
        return FileFooter(table, location, metadata, size, fs, path)


@contextlib.contextmanager
def _typed_errors(table: str, location: str, context: str = "") -> Iterator[None]:
    """Failures reading a data file as typed errors naming the table and the file."""
    try:
        yield
    except DeltaError:
        raise
    except FileNotFoundError as exc:
        raise MissingDataFileError(f"the data file is live in the Delta log but missing from storage{context}",
                                   table=table, file=location) from exc
    except DeltabergError as exc:  # a storage error: it says what failed, not for which table and file
        raise type(exc)(f"{exc} (table {location_text(table)}, file {location_text(location)})") from exc
    except OSError as exc:
        raise StorageError(f"the data file cannot be read: {_one_line(exc)} (table {location_text(table)}, "
                           f"file {location_text(location)})") from exc
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptDataFileError(f"the data file cannot be read as parquet: {_one_line(exc)}", table=table,
                                   file=location) from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
