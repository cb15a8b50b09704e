"""A Delta table at one version: protocol, metadata, schema, and the live files as an Arrow table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.arrow_util import from_numpy
from airflow_deltaberg.core.delta.file_checks.file_tables import LIVE_FILES_COLUMNS
from airflow_deltaberg.core.delta.log.log_segment import LogSegment, commit_key
from airflow_deltaberg.core.delta.log.replay import TableState
from airflow_deltaberg.core.delta.models import DomainMetadata, Metadata, Protocol, Transaction
from airflow_deltaberg.core.delta.schema import StructType
from airflow_deltaberg.core.delta.stats.stats import parse_stats, stats_type
from airflow_deltaberg.core.errors import CorruptLogError, StatsParseError

# Reader features whose log layout this engine reads. Others (e.g. catalogManaged, whose newest commits
# may live only in a catalog) are refused rather than read wrongly.
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
        "geospatial",
        "collations",
        "collations-preview",
    }
)
MAX_READER_VERSION = 3



@dataclass(frozen=True)
class Snapshot:
    """The state of a Delta table at ``version``."""

    table: str
    version: int
    timestamp: int  # commit timestamp in ms (the in-commit timestamp when enabled)
    segment: LogSegment
    state: TableState

    @property
    def protocol(self) -> Protocol:
        return self.state.protocol

    @property
    def metadata(self) -> Metadata:
        return self.state.metadata

    @property
    def defined_in(self) -> tuple[int, str] | None:
        """(version, log file) of the later of the protocol and metaData in force."""
        return self.state.defined_in

    @property
    def protocol_defined_in(self) -> tuple[int, str] | None:
        """(version, log file) of the protocol in force."""
        return self.state.protocol_defined_in

    @property
    def schema(self) -> StructType:
        return self.state.metadata.schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.state.metadata.partition_columns

    @property
    def column_mapping_mode(self) -> str:
        return self.state.metadata.column_mapping_mode

    @property
    def transactions(self) -> dict[str, Transaction]:
        return self.state.transactions

    @property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        return self.state.domain_metadata

    @property
    def commit_info(self) -> dict[str, Any] | None:
        return self.state.commit_info

    @property
    def num_files(self) -> int:
        return self.state.adds.num_rows

    @property
    def total_bytes(self) -> int:
        return int(pc.sum(self.state.adds.column("size")).as_py() or 0)

    @cached_property
    def files(self) -> pa.Table:
        """The live data files, one row each: path (as in the log, URI-encoded), partitionValues,
        size, modificationTime, dataChange, stats (the JSON as in the log; null for files listed by a
        Parquet checkpoint, whose stats are read only into stats_parsed), stats_parsed (every column),
        tags, deletionVector, row tracking fields, version (of the commit or checkpoint the add was read from)."""
        return self._files_table(self.parsed_stats())

    def read_files(self) -> pa.Table:
        """``files`` read anew and not kept by the snapshot: for one pass over a big table, whose caller can
        let go of the stats as soon as it is done with them."""
        if "files" in self.__dict__:
            return self.files
        return self._files_table(self.parsed_stats())

    def file_keys(self) -> pa.Table:
        """path and partitionValues of the live files, in ``files`` row order, without reading any stats."""
        return self.state.adds.select(["path", "partitionValues"])

    def files_with_stats(self, columns: Sequence[str] | None = None) -> pa.Table:
        """``files`` with stats_parsed holding the bounds and null counts of ``columns`` only (logical
        top-level names; ``[]``: numRecords and tightBounds only; None: every column, as ``files``).
        Parsing only the columns a caller uses is several times cheaper on big tables."""
        if columns is None:
            return self.files
        return self._files_table(self.parsed_stats(columns))

    def _files_table(self, stats: pa.ChunkedArray) -> pa.Table:
        adds = self.state.adds
        return pa.table({name: stats if name == "stats_parsed" else adds.column(name) for name in LIVE_FILES_COLUMNS})

    def parsed_stats(self, columns: Sequence[str] | None = None) -> pa.ChunkedArray:
        """The stats of the live files (``files`` row order) as ``stats_type(schema, columns)``: from the
        stats JSON of the commits, and from the checkpoint's ``stats_parsed`` struct when it has one (else
        its JSON). Read and parsed a chunk at a time. Stats that are not JSON raise CorruptLogError."""
        try:
            return self._parsed_stats(columns)
        except StatsParseError as exc:
            raise self._stats_error(exc) from exc

    def _stats_error(self, exc: StatsParseError) -> CorruptLogError:
        adds = self.state.adds
        version = adds.column("version")[exc.row].as_py()
        path = adds.column("path")[exc.row].as_py()
        index = self.state.checkpoint_add_index
        checkpoint = self.segment.checkpoint
        from_checkpoint = checkpoint is not None and index is not None and index[exc.row] >= 0
        key = checkpoint.files[0].key if from_checkpoint else commit_key(version)
        return CorruptLogError(exc.of(path).describe(), table=self.table, version=version, file=f"{self.table}/{key}")

    def _parsed_stats(self, columns: Sequence[str] | None) -> pa.ChunkedArray:
        if columns is None and "files" in self.__dict__:
            return self.files.column("stats_parsed")
        return pa.chunked_array(list(self._stats_chunks(columns)), type=stats_type(self.schema, columns))

    def iter_files(self) -> Iterator[pa.Table]:
        """``files`` a chunk of rows at a time, in row order, each chunk's stats read and parsed only when it is
        reached: one pass over a big table holds one chunk's stats, never every file's. Stats that are not JSON
        raise CorruptLogError."""
        adds = self.state.adds
        offset = 0
        try:
            for stats in self._stats_chunks(None):
                rows = adds.slice(offset, len(stats))
                offset += len(stats)
                yield pa.table({name: stats if name == "stats_parsed" else rows.column(name)
                                for name in LIVE_FILES_COLUMNS})
        except StatsParseError as exc:
            raise self._stats_error(exc) from exc
        if offset != adds.num_rows:
            raise AssertionError(f"{self.table}: the stats of {offset} of {adds.num_rows} live files were read")

    def _stats_chunks(self, columns: Sequence[str] | None) -> Iterator[pa.Array]:
        """The stats of the live files as ``stats_type(schema, columns)``, consecutive chunks in ``files`` row
        order, each read and parsed when reached."""
        if columns is None and "files" in self.__dict__:
            yield from self.files.column("stats_parsed").chunks
            return
        schema = self.schema
        target = stats_type(schema, columns)

        def parse(chunk: pa.Array) -> pa.Array:
            return parse_stats(chunk, schema, columns)

        raw = self.state.adds.column("stats")
        index = self.state.checkpoint_add_index
        checkpoint = self.state.checkpoint_stats
        if checkpoint is None or index is None or not (index >= 0).any():
            yield from _in_slices(raw, parse)
            return
        # The live files from the checkpoint come first, in checkpoint order (replay keeps log order).
        head = int(np.argmin(index >= 0)) if (index < 0).any() else len(index)
        wanted = index[:head]
        if (index[head:] >= 0).any() or (np.diff(wanted) <= 0).any():
            yield from self._parsed_stats_any_order(target, parse).chunks
            return
        head_raw = raw.slice(0, head)
        json_sources = head_raw.null_count < head  # JSON checkpoint sources keep their stats in the file table
        first = 0  # checkpoint add ordinal of the chunk's first row
        row = 0  # live file row of the chunk's first row
        for chunk in checkpoint.iter_chunks(target, parse):
            lo, hi = np.searchsorted(wanted, [first, first + len(chunk)])
            first += len(chunk)
            if hi == lo:
                continue
            if hi - lo != len(chunk):
                chunk = chunk.take(from_numpy(wanted[lo:hi] - (first - len(chunk))))
            if json_sources:
                own = head_raw.slice(row, len(chunk))
                if own.null_count < len(own):
                    parsed = pa.chunked_array(list(_in_slices(own, parse, first_row=row)), type=target)
                    chunk = pc.if_else(own.is_valid(), parsed, chunk).combine_chunks()
            row += len(chunk)
            yield chunk
        yield from _in_slices(raw.slice(head), parse, first_row=head)

    def _parsed_stats_any_order(self, target: pa.StructType, parse: Callable[[pa.Array], pa.Array]) -> pa.ChunkedArray:
        """parsed_stats for any order of checkpoint rows among the live files (holds every checkpoint stat)."""
        raw = self.state.adds.column("stats")
        index = self.state.checkpoint_add_index
        assert index is not None and self.state.checkpoint_stats is not None
        parsed = pa.chunked_array(list(_in_slices(raw, parse)), type=target)
        from_checkpoint = pa.chunked_array(list(self.state.checkpoint_stats.iter_chunks(target, parse)), type=target)
        mask = index < 0
        taken = from_checkpoint.take(from_numpy(np.where(mask, 0, index).astype(np.int64), mask=mask))
        return pc.if_else(raw.is_null(), taken, parsed)

    @property
    def tombstones(self) -> pa.Table:
        """``remove`` actions still kept as tombstones (for VACUUM)."""
        return self.state.removes.drop_columns(["is_add"])

    @property
    def num_records(self) -> int | None:
        """Total rows from the files' stats, or None when a file lacks numRecords."""
        counts = pc.struct_field(self.parsed_stats([]), "numRecords")
        if counts.null_count:
            return None
        total = int(pc.sum(counts).as_py() or 0)
        dv = self.state.adds.column("deletionVector").combine_chunks()
        if dv.null_count < len(dv):
            total -= int(pc.sum(dv.field("cardinality")).as_py() or 0)
        return total


_STATS_SLICE_ROWS = 65_536


def _in_slices(raw: pa.ChunkedArray, parse: Callable[[pa.Array], pa.Array], first_row: int = 0) -> Iterator[pa.Array]:
    """``parse`` over ``raw`` a slice at a time: the parser holds a slice's JSON several times over, and a
    chunk read from one big commit can hold the stats of a million files. A StatsParseError names its row as
    ``first_row`` plus the row's index in ``raw``."""
    offset = first_row
    for chunk in raw.chunks:
        for start in range(0, len(chunk), _STATS_SLICE_ROWS):
            try:
                parsed = parse(chunk.slice(start, _STATS_SLICE_ROWS))
            except StatsParseError as exc:
                raise exc.moved(offset + start) from exc
            yield parsed
        offset += len(chunk)
