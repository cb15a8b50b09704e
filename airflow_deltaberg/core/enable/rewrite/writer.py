"""Writing the data files of the enable rewrite: one file per run of equal partition values, with its stats.

The rewrite reads the live rows of a table (logical column names, as any Delta reader returns them) and writes
them again in the layout IcebergWriterCompatV1 requires: columns named by their physical name ``col-<id>``,
``PARQUET:field_id`` equal to the column id on every field, list elements and map keys/values included (Spark's
own parquet writer cannot write those nested ids; pyarrow can), partition columns materialized in the file,
``byte``/``short`` widened to ``integer``, int64 timestamps. Each file gets an ``add`` action with full stats;
every old live file a ``remove`` with ``dataChange=false`` (see ``actions``).

Nothing here needs Spark: ``write_files`` takes any iterator of Arrow batches, so it runs inside Spark
executors (``mapInArrow``) or in-process for small tables.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_deltaberg.core.delta.partition_codec import serialize_partition_value
from airflow_deltaberg.core.delta.schema import StructType, parse_schema
from airflow_deltaberg.core.enable.rewrite.files import RewriteSpec, WrittenFile
from airflow_deltaberg.core.enable.rewrite.layout import arrow_schema, physical_batch
from airflow_deltaberg.core.enable.rewrite.partitions import check_partition_types, partition_runs
from airflow_deltaberg.core.enable.rewrite.stats import FileStats
from airflow_deltaberg.core.storage import Storage, open_storage


class _FileWriter:
    """One open data file: buffers batches into row groups, keeps the stats."""

    def __init__(self, storage: Storage, spec: RewriteSpec, schema: StructType, target: pa.Schema,
                 partition_values: dict[str, str | None], seq: int):
        self.key = f"part-{seq:05d}-{spec.write_id}-{uuid.uuid4()}.c000.{spec.compression}.parquet"
        self.storage = storage
        self.spec = spec
        self.partition_values = partition_values
        self.stats = FileStats(schema, frozenset(spec.partition_columns), spec.string_prefix)
        fs, self.full_path = storage.arrow_path(self.key)
        self.fs = fs
        with storage.typed_errors("write", self.key):  # a full disk, a read-only folder: typed, not an OSError
            try:
                self.writer = pq.ParquetWriter(self.full_path, target, filesystem=fs, compression=spec.compression,
                                               store_decimal_as_integer=True)
            except BaseException:
                storage.delete(self.key)  # created before its header failed to write: no half-written file stays
                raise
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.stats.update(batch)
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.pending_rows >= self.spec.row_group_rows or self.pending_bytes >= self.spec.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            # One row group per flush: Spark hands over small batches (10k rows) that would make tiny groups.
            with self.storage.typed_errors("write", self.key):
                self.writer.write_table(pa.Table.from_batches(self.pending), row_group_size=self.pending_rows)
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> WrittenFile:
        self._flush()
        with self.storage.typed_errors("write", self.key):
            self.writer.close()
        info = self.fs.get_file_info(self.full_path)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else int(time.time() * 1000)
        return WrittenFile(quote(self.key), int(info.size), mtime, self.partition_values, self.stats.to_json(),
                           self.stats.num_records)

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.storage.delete(self.key)


def write_files(batches: Iterable[pa.RecordBatch], spec: RewriteSpec) -> Iterator[WrittenFile]:
    """Write the rows of ``batches`` (logical column names, every column of the table) into new data files
    below the table root, one file per run of equal partition values: feed it rows sorted by the partition
    columns to get one file per partition value. Empty input writes nothing."""
    schema = parse_schema(spec.schema_string)
    target = arrow_schema(schema)
    check_partition_types(schema, spec.partition_columns)
    partition_fields = [schema.field(name) for name in spec.partition_columns]
    storage = open_storage(spec.location, spec.storage_options)
    current: _FileWriter | None = None
    seq = 0
    try:
        for batch in batches:
            for start, length in partition_runs(batch, spec.partition_columns):
                rows = batch.slice(start, length)
                values = {f.physical_name: serialize_partition_value(rows.column(f.name)[0].as_py(), f.type)
                          for f in partition_fields}
                if current is not None and current.partition_values != values:
                    yield current.close()
                    current = None
                if current is None:
                    current = _FileWriter(storage, spec, schema, target, values, seq)
                    seq += 1
                current.write(physical_batch(rows, schema, target))
        if current is not None:
            done, current = current, None
            yield done.close()
    finally:
        if current is not None:  # an error mid-file: leave no half-written file behind
            current.abort()


def delete_files(storage: Storage, paths: Iterable[str]) -> None:
    """Delete files the rewrite wrote but did not commit (``paths`` as in WrittenFile.path) from the table's
    ``storage``."""
    for path in paths:
        storage.delete(unquote(path))
