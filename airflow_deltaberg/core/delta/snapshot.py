"""A Delta table at one version: protocol, metadata, schema, and the live files as an Arrow table."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
        size, modificationTime, dataChange, stats (JSON), stats_parsed, tags, deletionVector, row
        tracking fields."""
        adds = self.state.adds
        # Chunk by chunk: the stats strings of millions of files exceed what one array can hold.
        raw = adds.column("stats")
        parsed = pa.chunked_array([parse_stats(chunk, self.schema) for chunk in raw.chunks],
                                  type=stats_type(self.schema)) if raw.num_chunks else parse_stats(
            pa.array([], pa.string()), self.schema)
        if self.state.checkpoint_stats is not None:
            cp = self.state.checkpoint_stats
            cp = cp.combine_chunks() if isinstance(cp, pa.ChunkedArray) else cp
            from_checkpoint = conform(cp, stats_type(self.schema))
            use_checkpoint = pc.and_(raw.is_null().combine_chunks(), from_checkpoint.is_valid())
            parsed = pc.if_else(use_checkpoint, from_checkpoint, parsed.combine_chunks())
        columns = {name: adds.column(name) for name in FILE_COLUMNS if name != "stats_parsed"}
        columns["stats_parsed"] = parsed
        return pa.table({name: columns[name] for name in FILE_COLUMNS})

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
