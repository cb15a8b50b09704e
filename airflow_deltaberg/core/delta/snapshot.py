"""A Delta table at one version: protocol, metadata, schema, and the live files as an Arrow table."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.arrow_util import from_numpy
from airflow_deltaberg.core.delta.log_segment import LogSegment
from airflow_deltaberg.core.delta.models import DomainMetadata, Metadata, Protocol, Transaction
from airflow_deltaberg.core.delta.replay import TableState
from airflow_deltaberg.core.delta.schema import StructType
from airflow_deltaberg.core.delta.stats import conform, parse_stats, stats_type

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

FILE_COLUMNS = [
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "stats_parsed",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
]


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
        Parquet checkpoint, whose stats are read only into stats_parsed), stats_parsed, tags,
        deletionVector, row tracking fields."""
        adds = self.state.adds
        columns = {name: adds.column(name) for name in FILE_COLUMNS if name != "stats_parsed"}
        columns["stats_parsed"] = self._parsed_stats()
        return pa.table({name: columns[name] for name in FILE_COLUMNS})

    def _parsed_stats(self) -> pa.ChunkedArray:
        target = stats_type(self.schema)
        raw = self.state.adds.column("stats")
        # Chunk by chunk: the stats strings of millions of files exceed what one array can hold.
        parsed = pa.chunked_array([parse_stats(c, self.schema) for c in raw.chunks], type=target)
        index = self.state.checkpoint_add_index
        if self.state.checkpoint_stats is None or index is None or not (index >= 0).any():
            return parsed
        cp_raw, cp_parsed = self.state.checkpoint_stats.load()
        chunks = []
        for i, chunk in enumerate(cp_raw):
            from_json = parse_stats(chunk, self.schema)
            if cp_parsed is not None and cp_parsed[i] is not None:
                # Checkpoints may carry stats only as a struct (stats_parsed), or both.
                struct = conform(cp_parsed[i], target)
                from_json = pc.if_else(chunk.is_null(), struct, from_json)
            chunks.append(from_json)
        from_checkpoint = pa.chunked_array(chunks, type=target)
        identity = len(index) == len(from_checkpoint) == len(parsed) and bool((index == np.arange(len(index))).all())
        if identity and raw.null_count == len(raw):
            return from_checkpoint
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
        counts = self.files.column("stats_parsed").combine_chunks().field("numRecords")
        if counts.null_count:
            return None
        total = int(pc.sum(counts).as_py() or 0)
        dv = self.files.column("deletionVector").combine_chunks()
        if dv.null_count < len(dv):
            total -= int(pc.sum(dv.field("cardinality")).as_py() or 0)
        return total
