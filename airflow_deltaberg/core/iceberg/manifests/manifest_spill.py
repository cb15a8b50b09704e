"""The groups of a full conversion's manifests spilled to Arrow IPC files, so that a table's files with their stats
are never in memory all at once.

A full conversion's data manifests hold consecutive runs of the live files in pruning order. ``spill_groups``
takes each file's rank in that order (fixed beforehand from the paths and partition values alone) and routes the
files, read a chunk at a time with their stats, to spill files: one per group, or one per run of consecutive groups
on tables of more than ``SPILL_FILES`` groups, so that no more than that many files are open. ``SpilledGroups.group``
reads a group back from its spill file in rank order: the same rows in the same order as a take from a table of
every file, hence the same manifests.

Memory: the routing holds one chunk of files and at most ``SPILL_BUFFER_ROWS`` routed rows before they are
written; reading holds one spill file (one group, or a few).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.storage import Storage, open_storage

#: At most this many spill files per snapshot (each an open writer while the files are routed).
SPILL_FILES = 128
#: Rows routed to the spill files' buffers before the buffers are written.
SPILL_BUFFER_ROWS = 131_072
#: The column of a spilled row that holds its rank in pruning order.
RANK = "__pruning_rank"

_IPC_OPTIONS = pa.ipc.IpcWriteOptions(use_threads=False)
#: Bytes buffered per open spill file: an IPC record batch is written a buffer at a time (a few KB each for the
#: slices routed to one file), each its own write call when unbuffered.
_WRITE_BUFFER = 256 << 10


@dataclass(frozen=True)
class SpillArea:
    """Where spill files go: keys under ``prefix`` in the storage at ``location`` (a local temporary folder, or
    the table's own storage when other processes, e.g. Spark executors, read the groups)."""

    location: str
    storage_options: Mapping[str, Any] | None
    prefix: str

    def open_storage(self) -> Storage:
        return open_storage(self.location, self.storage_options)


@contextmanager
def local_spill_area() -> Iterator[SpillArea]:
    """A temporary local folder for spill files, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="deltaberg-spill-") as folder:
        yield SpillArea(folder, None, "")


@dataclass(frozen=True)
class SpilledGroups:
    """The files of a snapshot in pruning order, cut into groups of ``rows_per_manifest`` consecutive files (group
    ``i`` is the ``i``-th data manifest), spilled to ``keys`` (file ``k`` holds groups ``k * groups_per_file`` on).
    Picklable: a Spark executor reads its groups itself when the area is the table's storage."""

    area: SpillArea
    keys: tuple[str, ...]
    num_files: int
    rows_per_manifest: int
    groups_per_file: int

    def __len__(self) -> int:
        return math.ceil(self.num_files / self.rows_per_manifest)

    def group(self, index: int) -> pa.Table:
        """The files of group ``index``, in pruning order (the columns routed, without the rank)."""
        if not 0 <= index < len(self):
            raise IndexError(f"group {index} of {len(self)}")
        storage = self.area.open_storage()
        key = self.keys[index // self.groups_per_file]
        fs, path = storage.arrow_path(key)
        # A local spill file is mapped, not read into buffers: the one copy is the combine below.
        with storage.typed_errors("read", key):
            source = pa.memory_map(path) if isinstance(fs, pafs.LocalFileSystem) else fs.open_input_file(path)
            with source:
                spilled = pa.ipc.open_stream(source).read_all().combine_chunks()
        rank = spilled.column(RANK)
        if self.groups_per_file > 1:
            first = index * self.rows_per_manifest
            rank_np = to_numpy(rank)
            spilled = spilled.filter(from_numpy((rank_np >= first) & (rank_np < first + self.rows_per_manifest)))
            rank = spilled.column(RANK)
        return spilled.take(pc.sort_indices(rank)).drop_columns([RANK])

    def delete(self) -> None:
        storage = self.area.open_storage()
        for key in self.keys:
            storage.delete(key)


def spill_groups(area: SpillArea, chunks: Iterable[pa.Table], order: Callable[[], pa.Array], num_files: int, *,
                 rows_per_manifest: int) -> SpilledGroups:
    """Route ``chunks`` (consecutive rows of the ``num_files`` files, one schema) to the spill files of their
    groups. ``order`` gives the rows' pruning order (row indices); it is asked for once the first chunk is read, so
    that it can be computed meanwhile. A failure deletes the spill files written."""
    groups = math.ceil(num_files / rows_per_manifest)
    per_file = max(1, math.ceil(groups / SPILL_FILES))
    keys = tuple(f"{area.prefix}manifest-groups-{k:05d}.spill.arrow" for k in range(math.ceil(groups / per_file)))
    spilled = SpilledGroups(area, keys, num_files, rows_per_manifest, per_file)
    storage = area.open_storage()
    writers = _Writers(storage, keys)
    try:
        _route(chunks, order, num_files, rows_per_manifest * per_file, writers)
        writers.close()
    except BaseException:
        writers.close()
        for key in keys:
            storage.delete(key)
        raise
    return spilled


def _route(chunks: Iterable[pa.Table], order: Callable[[], pa.Array], num_files: int, rows_per_file: int,
           writers: _Writers) -> None:
    rank: np.ndarray | None = None
    buffers: dict[int, list[pa.Table]] = {}
    buffered = offset = 0
    for chunk in chunks:
        if rank is None:
            rank = np.empty(num_files, dtype=np.int64)
            rank[to_numpy(order())] = np.arange(num_files, dtype=np.int64)
        n = chunk.num_rows
        if not n:
            continue
        if offset + n > num_files:
            raise ValueError(f"more than the {num_files} files planned were routed")
        chunk_rank = rank[offset:offset + n]
        offset += n
        spill_file = chunk_rank // rows_per_file
        by_file = np.argsort(spill_file, kind="stable")
        routed = chunk.append_column(RANK, from_numpy(chunk_rank))
        if (np.diff(by_file) != 1).any():
            routed = routed.take(from_numpy(by_file))
        ordered = spill_file[by_file]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        for start, end in zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True):
            buffers.setdefault(int(ordered[start]), []).append(routed.slice(start, end - start))
        buffered += n
        if buffered >= SPILL_BUFFER_ROWS:
            writers.flush(buffers)
            buffers, buffered = {}, 0
    writers.flush(buffers)
    if offset != num_files:
        raise ValueError(f"{offset} of the {num_files} files planned were routed")


class _Writers:
    """One Arrow IPC stream writer per spill file, opened when its first rows come (every file is written, empty
    ones with the schema only)."""

    def __init__(self, storage: Storage, keys: tuple[str, ...]) -> None:
        self.storage = storage
        self.keys = keys
        self.schema: pa.Schema | None = None
        self.open: dict[int, tuple[Any, pa.ipc.RecordBatchStreamWriter]] = {}

    def _writer(self, index: int) -> pa.ipc.RecordBatchStreamWriter:
        if index not in self.open:
            fs, path = self.storage.arrow_path(self.keys[index])
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            stream = fs.open_output_stream(path, buffer_size=_WRITE_BUFFER)
            self.open[index] = (stream, pa.ipc.new_stream(stream, self.schema, options=_IPC_OPTIONS))
        return self.open[index][1]

    def flush(self, buffers: dict[int, list[pa.Table]]) -> None:
        for index in sorted(buffers):
            rows = pa.concat_tables(buffers[index])  # one record batch per chunk routed: no copy before the write
            if self.schema is None:
                self.schema = rows.schema
            with self.storage.typed_errors("write", self.keys[index]):
                self._writer(index).write_table(rows)

    def close(self) -> None:
        if self.schema is not None:
            for index in range(len(self.keys)):
                with self.storage.typed_errors("write", self.keys[index]):
                    self._writer(index)
        open_files, self.open = self.open, {}
        for index, (stream, writer) in open_files.items():
            with self.storage.typed_errors("write", self.keys[index]):
                writer.close()
                stream.close()
