"""The copy of a manifest's entries kept in the conversion state, and the entries read back through it.

The copy keeps the columns a later run changes or looks up (status, snapshot id, sequence numbers, the file, its
partition and record count, the data_file tail) and where each entry's encoded row starts in the manifest
(``ROW_START``), not the stats: a manifest that a removal touches is rewritten from its own bytes. Reading back
checks that each row starts with what the copy's header, content and path encode to, and ends with its tail;
a manifest and a copy that disagree are refused (ConversionStateError), never mixed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.types import StructType

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.errors import AvroContainerError, ConversionStateError
from airflow_deltaberg.core.iceberg.avro.avro_container import read_rows
from airflow_deltaberg.core.iceberg.avro.avro_encode import binary_from_offsets, binary_parts
from airflow_deltaberg.core.iceberg.avro.avro_iceberg import encode_rows
from airflow_deltaberg.core.iceberg.manifests.manifest import ENTRY_HEADER_TYPE, PREFIX_COLUMN, data_file_tail_type
from airflow_deltaberg.core.iceberg.manifests.manifest_schema import data_file_type
from airflow_deltaberg.core.redact import location_text

#: Where an entry's encoded row starts in its manifest's rows joined (blocks inflated, one after another).
ROW_START = "avro_row_start"
#: What the copy keeps: the header, what a rewrite summarizes or looks up, and the tail (v3's, a superset of v2's).
KEPT_COLUMNS = (*(f.name for f in ENTRY_HEADER_TYPE.fields), "content", "file_path", "partition", "record_count",
                *(f.name for f in data_file_tail_type(3).fields))
#: What a row starts with: the entry's header, then data_file's content and file_path.
_LEAD_TYPE = StructType(*ENTRY_HEADER_TYPE.fields, *data_file_type(StructType()).fields[:2])


def entries_index(entries: pa.Table, row_starts: np.ndarray | None) -> pa.Table:
    """The copy of ``entries`` written with its manifest, whose rows start at ``row_starts``."""
    if row_starts is None or len(row_starts) != entries.num_rows:
        raise ValueError("the row start of every entry is needed")
    kept = entries.select([c for c in KEPT_COLUMNS if c in entries.column_names])
    return kept.append_column(ROW_START, from_numpy(np.asarray(row_starts, np.int64)))


def index_entries(index: pa.Table, manifest: bytes, location: str) -> pa.Table:
    """The entries of the manifest ``manifest`` (stored at ``location``) whose copy is ``index``: the copy's
    columns and each entry's data_file bytes up to its tail (``PREFIX_COLUMN``)."""
    def mismatch(what: str) -> ConversionStateError:
        return ConversionStateError(f"the manifest {location_text(location)} does not match the copy of its entries "
                                    f"in the conversion state ({what})")

    try:
        rows = read_rows(manifest)
    except AvroContainerError as exc:
        raise mismatch(f"not a readable manifest: {exc}") from exc
    n = index.num_rows
    if rows.count != n:
        raise mismatch(f"{rows.count} entries against {n}")
    try:
        format_version = int(rows.metadata.get("format-version", b"2"))
    except ValueError as exc:
        raise mismatch("format-version is not a number") from exc
    columns = {name: index.column(name).combine_chunks() for name in index.column_names if name != ROW_START}
    if "content" not in columns:  # data manifests' copies may leave it out: every entry is a data file
        columns["content"] = from_numpy(np.zeros(n, np.int32))
    lead_offsets, lead_data = binary_parts(encode_rows(_LEAD_TYPE, columns, n))
    header_lengths = np.diff(binary_parts(encode_rows(ENTRY_HEADER_TYPE, columns, n))[0])
    tail_offsets, tail_data = binary_parts(encode_rows(data_file_tail_type(format_version), columns, n))
    lead_lengths, tail_lengths = np.diff(lead_offsets), np.diff(tail_offsets)

    payload = np.frombuffer(rows.payload, np.uint8)
    starts = to_numpy(index.column(ROW_START)).astype(np.int64)
    ends = np.append(starts[1:], len(payload))
    if n == 0:
        if len(payload):
            raise mismatch("bytes after the last entry")
        empty = binary_from_offsets(np.zeros(1, np.int64), np.zeros(0, np.uint8))
        return index.drop_columns([ROW_START]).append_column(PREFIX_COLUMN, empty)
    if starts[0] != 0 or (ends - starts < lead_lengths + tail_lengths).any():
        raise mismatch("row boundaries")
    lead_at = _positions(starts, lead_lengths)
    tail_at = _positions(ends - tail_lengths, tail_lengths)
    if not (np.array_equal(payload[lead_at], np.frombuffer(lead_data, np.uint8)[lead_offsets[0]:lead_offsets[-1]])
            and np.array_equal(payload[tail_at],
                               np.frombuffer(tail_data, np.uint8)[tail_offsets[0]:tail_offsets[-1]])):
        raise mismatch("an entry's status, snapshot, sequence numbers, path or tail")
    keep = np.ones(len(payload), bool)
    keep[_positions(starts, header_lengths)] = False
    keep[tail_at] = False
    prefix_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(ends - starts - header_lengths - tail_lengths, out=prefix_offsets[1:])
    prefix = binary_from_offsets(prefix_offsets, payload[keep])
    return index.drop_columns([ROW_START]).append_column(PREFIX_COLUMN, prefix)


def _positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The byte positions of the ranges [start, start + length), one range after another."""
    lengths = lengths.astype(np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
