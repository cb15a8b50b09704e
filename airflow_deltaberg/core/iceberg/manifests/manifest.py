"""Iceberg v2 and v3 manifests and manifest lists written from Arrow columns.

``write_manifest`` encodes a whole table of entries a chunk of rows at a time (see ``avro_encode``) and returns
what the manifest list needs; ``write_manifest_list`` writes the manifest_file rows of a snapshot, encoding them
(``encode_manifest_list_rows``) and writing the encoded rows (``write_manifest_list_rows``, which also takes rows
encoded by an earlier snapshot).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FloatType, IcebergType, StructType

from airflow_deltaberg.core.iceberg.arrow_values import int_values, validity
from airflow_deltaberg.core.iceberg.avro.avro_container import AvroContainerWriter
from airflow_deltaberg.core.iceberg.avro.avro_encode import binary_parts
from airflow_deltaberg.core.iceberg.avro.avro_iceberg import avro_schema, encode_rows
from airflow_deltaberg.core.iceberg.manifests.manifest_schema import (
    FIELD_SUMMARY_TYPE,
    data_file_type,
    manifest_entry_type,
    manifest_file_type,
)
from airflow_deltaberg.core.iceberg.single_value import serialize_bounds

__all__ = [
    "FieldSummary",
    "ManifestFileInfo",
    "ManifestSummary",
    "ENTRY_HEADER_TYPE",
    "PREFIX_COLUMN",
    "data_file_tail_type",
    "assign_first_row_ids",
    "assign_sequence_numbers",
    "encode_manifest_list_rows",
    "manifest_list_columns",
    "manifest_metadata",
    "serialize_bounds",
    "write_manifest",
    "write_manifest_list",
    "write_manifest_list_rows",
]

STATUS_EXISTING, STATUS_ADDED, STATUS_DELETED = 0, 1, 2
MANIFEST_CONTENT = {"data": 0, "deletes": 1}
#: An entries column holding each entry's data_file encoded already up to its tail (``data_file_tail_type``):
#: a manifest rewritten from the one it replaces copies these bytes instead of encoding the stats again.
PREFIX_COLUMN = "data_file_prefix"
ENTRY_COLUMNS = {
    version: frozenset(["status", "snapshot_id", "sequence_number", "file_sequence_number", PREFIX_COLUMN]
                       + [f.name for f in data_file_type(StructType(), version).fields])
    for version in (2, 3)
}
#: The manifest_entry fields before data_file, which a rewrite changes (status, snapshot id, sequence numbers).
ENTRY_HEADER_TYPE = StructType(*manifest_entry_type(StructType()).fields[:4])
FORMAT_VERSIONS = (2, 3)
# A whole 25k-entry manifest in one chunk: two writers encode at once, and with 8k-row chunks they wait on each
# other for the GIL between numpy calls (300k entries written two at a time: 0.88 s against 1.13 s wall, 6 rounds).
# Wide entries (stats of hundreds of columns) get fewer rows, so that a chunk's encoding stays near CHUNK_BYTES
# (and far from Arrow's 2 GiB binary limit).
DEFAULT_CHUNK_ROWS = 32_768
MIN_CHUNK_ROWS = 1_024
CHUNK_BYTES = 64 << 20
DEFAULT_BLOCK_ROWS = 4_096
#: Arrow types of the manifest_file fields that are not longs.
MANIFEST_LIST_ARROW_TYPES = {
    "manifest_path": pa.string(),
    "key_metadata": pa.binary(),
    "partitions": pa.list_(pa.struct(
        [(f.name, pa.bool_() if f.field_id in (509, 518) else pa.binary()) for f in FIELD_SUMMARY_TYPE.fields])),
}


@dataclass(frozen=True)
class FieldSummary:
    """Partition field summary of a manifest (manifest list field 508); bounds in single-value serialization."""

    contains_null: bool
    contains_nan: bool | None
    lower_bound: bytes | None
    upper_bound: bytes | None


@dataclass(frozen=True)
class ManifestFileInfo:
    """One manifest_file row of a manifest list. ``None`` sequence numbers take the list's sequence number."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: int
    added_snapshot_id: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    sequence_number: int | None = None
    min_sequence_number: int | None = None
    partitions: tuple[FieldSummary, ...] | None = ()
    key_metadata: bytes | None = None
    first_row_id: int | None = None  # v3 data manifests: the row id of its first row without first_row_id


@dataclass(frozen=True)
class ManifestSummary:
    """What ``write_manifest`` wrote: counts by status, partition summaries, length in bytes."""

    path: str | None
    length: int
    partition_spec_id: int
    content: int
    snapshot_id: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    min_sequence_number: int | None
    partitions: tuple[FieldSummary, ...]
    #: Where each entry's encoded row starts in the manifest's rows joined (its blocks inflated, one after another).
    row_starts: np.ndarray | None = dataclass_field(default=None, compare=False, repr=False)

    def manifest_file(self, path: str | None = None) -> ManifestFileInfo:
        """The manifest list row for this manifest, stored at ``path`` (default: where it was written)."""
        manifest_path = path if path is not None else self.path
        if manifest_path is None:
            raise ValueError("the manifest was written to a stream: pass its path")
        return ManifestFileInfo(
            manifest_path=manifest_path,
            manifest_length=self.length,
            partition_spec_id=self.partition_spec_id,
            content=self.content,
            added_snapshot_id=self.snapshot_id,
            added_files_count=self.added_files_count,
            existing_files_count=self.existing_files_count,
            deleted_files_count=self.deleted_files_count,
            added_rows_count=self.added_rows_count,
            existing_rows_count=self.existing_rows_count,
            deleted_rows_count=self.deleted_rows_count,
            sequence_number=None,
            min_sequence_number=self.min_sequence_number,
            partitions=self.partitions,
        )


def data_file_tail_type(format_version: int = 2) -> StructType:
    """The data_file fields after ``sort_order_id`` (row lineage and what a delete file references), which a
    rewrite may change: a rewritten v3 data entry gets its inherited ``first_row_id`` written out."""
    fields = data_file_type(StructType(), format_version).fields
    first = next(i for i, f in enumerate(fields) if f.name in ("first_row_id", "referenced_data_file"))
    return StructType(*fields[first:])


@contextmanager
def _output_stream(output: Any, filesystem: pafs.FileSystem | None) -> Iterator[Any]:
    if hasattr(output, "write"):
        yield output
    elif filesystem is not None:
        with filesystem.open_output_stream(os.fspath(output)) as stream:
            yield stream
    else:
        with open(output, "wb") as stream:
            yield stream


def manifest_metadata(schema: Schema, spec: PartitionSpec, content: str, format_version: int = 2) -> dict[str, str]:
    """The Avro file metadata a manifest must carry."""
    fields = [
        {"name": f.name, "transform": str(f.transform), "source-id": f.source_id, "field-id": f.field_id}
        for f in spec.fields
    ]
    return {
        "schema": schema.model_dump_json(),
        "schema-id": str(schema.schema_id),
        "partition-spec": json.dumps(fields, separators=(",", ":")),
        "partition-spec-id": str(spec.spec_id),
        "format-version": str(format_version),
        "content": content,
    }


def write_manifest(
    output: Any,
    entries: pa.Table | pa.RecordBatch,
    *,
    schema: Schema,
    spec: PartitionSpec,
    snapshot_id: int,
    content: str = "data",
    filesystem: pafs.FileSystem | None = None,
    codec: str = "deflate",
    compression_level: int = 1,
    compression_threads: int | None = None,
    chunk_rows: int | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    sync_marker: bytes | None = None,
    format_version: int = 2,
) -> ManifestSummary:
    """Write a manifest (Iceberg ``format_version`` 2 or 3) holding one entry per row of ``entries``.

    ``output`` is a writable binary stream, or a path opened with ``filesystem`` (local files without one).
    Columns are named as the manifest_entry / data_file fields (status, snapshot_id, sequence_number,
    file_sequence_number, content, file_path, file_format, partition, record_count, file_size_in_bytes,
    column_sizes, value_counts, null_value_counts, nan_value_counts, lower_bounds, upper_bounds, key_metadata,
    split_offsets, equality_ids, sort_order_id, referenced_data_file, and in v3 first_row_id, content_offset,
    content_size_in_bytes); absent optional columns are written as null, an absent ``content`` as 0 in data
    manifests. Maps are list<struct<key, value>> or map columns. With a ``data_file_prefix`` column (``PREFIX_COLUMN``),
    each entry's data_file up to its tail (``data_file_tail_type``) is those bytes, as read back from an earlier
    manifest, and only the entry's header and tail are encoded.

    Rows are encoded ``chunk_rows`` at a time (default: ``DEFAULT_CHUNK_ROWS``, fewer for wide entries) and stored
    in Avro blocks of ``block_rows``. ``deflate`` uses zlib level ``compression_level`` (1: about 2.5x faster than
    zlib's default 6 for ~5% larger files) on ``compression_threads`` threads (default: up to 4, one per core).
    """
    if content not in MANIFEST_CONTENT:
        raise ValueError(f"manifest content must be 'data' or 'deletes', got {content!r}")
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    table = pa.Table.from_batches([entries]) if isinstance(entries, pa.RecordBatch) else entries
    partition_type = spec.partition_type(schema)
    table = _checked_entries(table, partition_type, content, snapshot_id, format_version)
    entry_type = manifest_entry_type(partition_type, format_version)
    tail_type = data_file_tail_type(format_version)
    prefixed = PREFIX_COLUMN in table.column_names
    if prefixed and table.column(PREFIX_COLUMN).null_count:
        raise ValueError(f"null in column {PREFIX_COLUMN!r}")
    row_lengths: list[np.ndarray] = []
    if chunk_rows is None:
        chunk_rows = _chunk_rows(table)
    if compression_threads is None:
        compression_threads = min(4, os.cpu_count() or 1)
    with (
        _output_stream(output, filesystem) as stream,
        AvroContainerWriter(
            stream,
            avro_schema(entry_type, "manifest_entry"),
            manifest_metadata(schema, spec, content, format_version),
            codec=codec,
            compression_level=compression_level,
            sync_marker=sync_marker,
            threads=compression_threads,
        ) as writer,
    ):
        for batch in table.to_batches(max_chunksize=chunk_rows):
            columns = dict(zip(batch.schema.names, batch.columns, strict=True))
            if prefixed:
                rows = pc.binary_join_element_wise(encode_rows(ENTRY_HEADER_TYPE, columns, batch.num_rows),
                                                   columns[PREFIX_COLUMN],
                                                   encode_rows(tail_type, columns, batch.num_rows), b"")
            else:
                rows = encode_rows(entry_type, {**columns, "data_file": columns}, batch.num_rows)
            row_lengths.append(np.diff(binary_parts(rows)[0]))
            writer.write_rows(rows, block_rows)
    path = None if hasattr(output, "write") else os.fspath(output)
    summary = _summarize(table, partition_type, path, writer.bytes_written, spec.spec_id, content, snapshot_id)
    lengths = np.concatenate(row_lengths) if row_lengths else np.zeros(0, np.int64)
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return replace(summary, row_starts=starts)


def _chunk_rows(table: pa.Table) -> int:
    """Rows of ``table`` to encode at once: ``DEFAULT_CHUNK_ROWS``, fewer where its rows are wide."""
    row_bytes = table.nbytes // max(table.num_rows, 1)
    return max(MIN_CHUNK_ROWS, min(DEFAULT_CHUNK_ROWS, CHUNK_BYTES // max(row_bytes, 1)))


def _checked_entries(table: pa.Table, partition_type: StructType, content: str, snapshot_id: int,
                     format_version: int = 2) -> pa.Table:
    unknown = set(table.column_names) - ENTRY_COLUMNS[format_version]
    if unknown:
        raise ValueError(f"unknown manifest entry columns: {sorted(unknown)}")
    if "status" not in table.column_names:
        raise ValueError("missing required column 'status'")
    status = _int_column(table, "status")
    if not np.isin(status, (STATUS_EXISTING, STATUS_ADDED, STATUS_DELETED)).all():
        raise ValueError("status must be 0 (existing), 1 (added) or 2 (deleted)")
    if "content" in table.column_names:
        file_content = _int_column(table, "content")
        allowed = (0,) if content == "data" else (1, 2)
        if not np.isin(file_content, allowed).all():
            raise ValueError(f"a {content} manifest holds only files of content {allowed}")
    elif content == "data":
        table = table.append_column("content", pa.array(np.zeros(len(table), np.int32)))
    else:
        raise ValueError("delete manifests need a 'content' column (1 position, 2 equality deletes)")
    unassigned = _null_mask(table, "sequence_number")
    for name in ("sequence_number", "file_sequence_number"):
        if (_null_mask(table, name) & (status != STATUS_ADDED)).any():
            raise ValueError(f"existing and deleted entries need an explicit {name}")
    if "snapshot_id" in table.column_names:
        snapshots = table.column("snapshot_id").combine_chunks()
        other = ~_null_mask(table, "snapshot_id") & (int_values(snapshots) != snapshot_id)
        if (other & unassigned).any():
            raise ValueError("entries from another snapshot need an explicit sequence_number")
    names = [f.name for f in partition_type.fields]
    if "partition" in table.column_names:
        given = [f.name for f in table.schema.field("partition").type]
        if given != names:
            raise ValueError(f"partition struct fields {given} do not match the spec's {names}")
    elif names:
        raise ValueError("missing required column 'partition'")
    return table


def _int_column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    if col.null_count:
        raise ValueError(f"null in required column {name!r}")
    return int_values(col)


def _null_mask(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.ones(len(table), bool)
    valid = validity(table.column(name).combine_chunks())
    return np.zeros(len(table), bool) if valid is None else ~valid


def _summarize(
    table: pa.Table,
    partition_type: StructType,
    path: str | None,
    length: int,
    spec_id: int,
    content: str,
    snapshot_id: int,
) -> ManifestSummary:
    status = _int_column(table, "status")
    records = _int_column(table, "record_count")
    counts = {s: (int((status == s).sum()), _long_sum(records[status == s])) for s in (0, 1, 2)}
    live_seq = ~_null_mask(table, "sequence_number") & (status != STATUS_DELETED)
    min_seq = None
    if live_seq.any():
        min_seq = int(int_values(table.column("sequence_number").combine_chunks())[live_seq].min())
    partitions: tuple[FieldSummary, ...] = ()
    if partition_type.fields:
        struct = table.column("partition").combine_chunks()
        partitions = tuple(field_summary(struct.field(i), f.field_type) for i, f in enumerate(partition_type.fields))
    return ManifestSummary(
        path=path,
        length=length,
        partition_spec_id=spec_id,
        content=MANIFEST_CONTENT[content],
        snapshot_id=snapshot_id,
        added_files_count=counts[STATUS_ADDED][0],
        existing_files_count=counts[STATUS_EXISTING][0],
        deleted_files_count=counts[STATUS_DELETED][0],
        added_rows_count=counts[STATUS_ADDED][1],
        existing_rows_count=counts[STATUS_EXISTING][1],
        deleted_rows_count=counts[STATUS_DELETED][1],
        min_sequence_number=min_seq,
        partitions=partitions,
    )


def _long_sum(values: np.ndarray) -> int:
    if values.size == 0 or values.sum(dtype=np.float64) < 2.0**62:
        return int(values.sum())
    total = sum(int(v) for v in values)  # near the limit numpy would wrap silently
    if total >= 2**63:
        raise ValueError("a row count sum overflows the manifest list's long fields")
    return total


def field_summary(values: pa.Array, iceberg_type: IcebergType) -> FieldSummary:
    """contains_null / contains_nan and serialized bounds of the non-null, non-NaN values of a partition field."""
    if isinstance(values.type, pa.BaseExtensionType):
        values = values.storage  # uuid: compared as bytes
    present = pc.drop_null(values)
    contains_nan: bool = False
    if isinstance(iceberg_type, (FloatType, DoubleType)):
        nan = pc.is_nan(present)
        contains_nan = bool(pc.any(nan).as_py())
        present = present.filter(pc.invert(nan))
    if len(present) == 0:
        return FieldSummary(values.null_count > 0, contains_nan, None, None)
    extremes = pc.min_max(present)
    low, high = extremes["min"], extremes["max"]
    if isinstance(iceberg_type, (FloatType, DoubleType)):
        low, high = _signed_zero_bounds(present, low, high)
    lower, upper = serialize_bounds(pa.array([low, high], type=present.type), iceberg_type).to_pylist()
    return FieldSummary(values.null_count > 0, contains_nan, lower, upper)


def _signed_zero_bounds(values: pa.Array, low: pa.Scalar, high: pa.Scalar) -> tuple[pa.Scalar, pa.Scalar]:
    # -0.0 sorts before +0.0 for Iceberg (IEEE 754 totalOrder) but compares equal in min/max.
    arr = np.asarray(values.to_numpy(zero_copy_only=False))
    zeros = arr == 0
    if low.as_py() == 0 and (zeros & np.signbit(arr)).any():
        low = pa.scalar(-0.0, values.type)
    if high.as_py() == 0 and (zeros & ~np.signbit(arr)).any():
        high = pa.scalar(0.0, values.type)
    return low, high


def manifest_list_columns(manifests: Sequence[ManifestFileInfo], format_version: int = 2) -> dict[str, pa.Array]:
    """The manifest_file fields of ``manifests`` as Arrow columns, named as the fields (``encode_manifest_list_rows``
    takes them, and the conversion state keeps them)."""
    columns: dict[str, pa.Array] = {}
    for field in manifest_file_type(format_version).fields:
        if field.name == "partitions":
            continue
        values = [getattr(m, field.name) for m in manifests]
        columns[field.name] = pa.array(values, MANIFEST_LIST_ARROW_TYPES.get(field.name, pa.int64()))
    columns["partitions"] = pa.array(
        [None if m.partitions is None else [asdict(p) for p in m.partitions] for m in manifests],
        MANIFEST_LIST_ARROW_TYPES["partitions"],
    )
    return columns


def encode_manifest_list_rows(columns: Mapping[str, pa.Array | pa.ChunkedArray], n: int,
                              format_version: int = 2) -> pa.BinaryArray:
    """The Avro encoding of each of the ``n`` manifest_file rows given by ``columns`` (as ``manifest_list_columns``
    makes them; other columns are ignored): the rows ``write_manifest_list_rows`` writes."""
    return encode_rows(manifest_file_type(format_version), columns, n)


def write_manifest_list(
    output: Any,
    manifests: Sequence[ManifestFileInfo],
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    *,
    filesystem: pafs.FileSystem | None = None,
    codec: str = "deflate",
    compression_level: int = 1,
    sync_marker: bytes | None = None,
    format_version: int = 2,
    first_row_id: int | None = None,
) -> int:
    """Write a manifest list for snapshot ``snapshot_id``; returns its length in bytes.

    Manifests with unassigned (None) sequence numbers get ``sequence_number``; they must be added by this snapshot.
    In v3, ``first_row_id`` is the snapshot's, and data manifests carry theirs (``assign_first_row_ids``).
    """
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    rows = [assign_sequence_numbers(m, snapshot_id, sequence_number) for m in manifests]
    if format_version >= 3 and any(m.content == 0 and m.first_row_id is None for m in rows):
        raise ValueError("v3 data manifests need a first_row_id (assign_first_row_ids)")
    encoded = encode_manifest_list_rows(manifest_list_columns(rows, format_version), len(rows), format_version)
    return write_manifest_list_rows(output, encoded, snapshot_id, parent_snapshot_id, sequence_number,
                                    filesystem=filesystem, codec=codec, compression_level=compression_level,
                                    sync_marker=sync_marker, format_version=format_version, first_row_id=first_row_id)


def write_manifest_list_rows(
    output: Any,
    rows: pa.BinaryArray | pa.ChunkedArray,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    *,
    filesystem: pafs.FileSystem | None = None,
    codec: str = "deflate",
    compression_level: int = 1,
    sync_marker: bytes | None = None,
    format_version: int = 2,
    first_row_id: int | None = None,
) -> int:
    """Write a manifest list of manifest_file rows encoded already (``encode_manifest_list_rows``, with their
    sequence numbers and, in v3, first row ids resolved); returns its length in bytes."""
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    if isinstance(rows, pa.ChunkedArray):
        rows = rows.combine_chunks() if rows.num_chunks else pa.array([], pa.binary())
    if rows.null_count:
        raise ValueError("a manifest list row is missing (null)")
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_snapshot_id is None else str(parent_snapshot_id),
        "sequence-number": str(sequence_number),
        "format-version": str(format_version),
    }
    if format_version >= 3:
        metadata["first-row-id"] = "null" if first_row_id is None else str(first_row_id)
    with (
        _output_stream(output, filesystem) as stream,
        AvroContainerWriter(
            stream,
            avro_schema(manifest_file_type(format_version), "manifest_file"),
            metadata,
            codec=codec,
            compression_level=compression_level,
            sync_marker=sync_marker,
        ) as writer,
    ):
        writer.write_rows(rows)
    return writer.bytes_written


def assign_sequence_numbers(manifest: ManifestFileInfo, snapshot_id: int, sequence_number: int) -> ManifestFileInfo:
    """The manifest with ``sequence_number`` where its sequence numbers are unassigned (None), which only the
    manifests snapshot ``snapshot_id`` adds may be."""
    if manifest.sequence_number is not None and manifest.min_sequence_number is not None:
        return manifest
    if manifest.added_snapshot_id != snapshot_id:
        raise ValueError(
            f"manifest {manifest.manifest_path} from snapshot {manifest.added_snapshot_id} has no sequence number"
        )
    return replace(
        manifest,
        sequence_number=sequence_number if manifest.sequence_number is None else manifest.sequence_number,
        min_sequence_number=sequence_number if manifest.min_sequence_number is None else manifest.min_sequence_number,
    )


def assign_first_row_ids(manifests: Sequence[ManifestFileInfo], next_row_id: int) -> tuple[list[ManifestFileInfo], int]:
    """v3 row lineage: each data manifest without a first_row_id gets the table's next row id, which moves on by
    the manifest's added and existing rows (as Iceberg's reference writer does; rows that already have ids leave
    a gap). Returns the manifests and the new next row id."""
    assigned = []
    for manifest in manifests:
        if manifest.content == 0 and manifest.first_row_id is None:
            manifest = replace(manifest, first_row_id=next_row_id)
            next_row_id += manifest.added_rows_count + manifest.existing_rows_count
        assigned.append(manifest)
    return assigned, next_row_id
