"""Manifest write throughput: the column-at-a-time writer vs pyiceberg's per-object ManifestWriter.

Entries carry value/null counts and lower/upper bounds for 20 long columns and one int partition field.
Ours writes all ``--entries`` (to a file, and to a discarding sink to leave the file system out); pyiceberg
writes ``--baseline-entries`` prepared DataFile objects (only the writing is timed), its rate extrapolated.
Rates are wall-clock; CPU-time rates are printed too, as other load on the machine skews wall-clock.

    python benchmarks/bench_manifest_write.py --entries 1000000 --baseline-entries 50000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
from pyiceberg.manifest import write_manifest as pyiceberg_write_manifest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, NestedField

from airflow_deltaberg.core.iceberg.manifests.manifest import write_manifest

COLUMNS = 20
SNAPSHOT_ID = 4_242_424_242
KV_LONG = pa.list_(pa.struct([("key", pa.int32()), ("value", pa.int64())]))
KV_BINARY = pa.list_(pa.struct([("key", pa.int32()), ("value", pa.binary())]))


def table_schema() -> tuple[Schema, PartitionSpec]:
    fields = [NestedField(i + 1, f"c{i}", LongType(), required=False) for i in range(COLUMNS)]
    fields.append(NestedField(COLUMNS + 1, "part", IntegerType(), required=False))
    schema = Schema(*fields)
    spec = PartitionSpec(PartitionField(COLUMNS + 1, 1000, IdentityTransform(), "part"))
    return schema, spec


def _kv(keys: np.ndarray, values: pa.Array, n: int, list_type: pa.DataType) -> pa.Array:
    items = pa.StructArray.from_arrays([pa.array(np.tile(keys, n)), values], names=["key", "value"])
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * len(keys))
    return pa.ListArray.from_arrays(offsets, items, type=list_type)


def _long_bounds(values: np.ndarray) -> pa.Array:
    """8-byte little-endian single-value serialization of every value, row-major."""
    data = np.ascontiguousarray(values).astype("<i8").ravel()
    offsets = np.arange(data.size + 1, dtype=np.int32) * 8
    return pa.BinaryArray.from_buffers(pa.binary(), data.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def make_entries(n: int, seed: int = 7) -> pa.Table:
    """``n`` added data files with metrics for every column, built without a per-row loop."""
    rng = np.random.default_rng(seed)
    keys = np.arange(1, COLUMNS + 1, dtype=np.int32)
    low = rng.integers(-(2**40), 2**40, size=(n, COLUMNS))
    high = low + rng.integers(0, 2**20, size=(n, COLUMNS))
    records = rng.integers(1, 2_000_000, size=n)
    ids = pa.array(np.arange(n)).cast(pa.string())
    paths = pc.binary_join_element_wise("s3://bucket/warehouse/db/events/data/part-", ids, "-c000.snappy.parquet", "")
    return pa.table(
        {
            "status": pa.array(np.ones(n, np.int32)),
            "snapshot_id": pa.array(np.full(n, SNAPSHOT_ID, np.int64)),
            "sequence_number": pa.nulls(n, pa.int64()),
            "file_sequence_number": pa.nulls(n, pa.int64()),
            "content": pa.array(np.zeros(n, np.int32)),
            "file_path": paths,
            "file_format": pa.array(np.full(n, "PARQUET", object), pa.string()),
            "partition": pa.StructArray.from_arrays([pa.array((np.arange(n) % 365).astype(np.int32))], ["part"]),
            "record_count": pa.array(records),
            "file_size_in_bytes": pa.array(records * 37),
            "value_counts": _kv(keys, pa.array(np.repeat(records, COLUMNS)), n, KV_LONG),
            "null_value_counts": _kv(keys, pa.array(rng.integers(0, 1000, n * COLUMNS)), n, KV_LONG),
            "lower_bounds": _kv(keys, _long_bounds(low), n, KV_BINARY),
            "upper_bounds": _kv(keys, _long_bounds(high), n, KV_BINARY),
        }
    )


def _as_dict(items: list[dict]) -> dict:
    return {item["key"]: item["value"] for item in items}


def pyiceberg_entries(table: pa.Table) -> list[ManifestEntry]:
    rows = table.to_pylist()
    entries = []
    for row in rows:
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=row["file_path"],
            file_format=FileFormat.PARQUET,
            partition=Record(row["partition"]["part"]),
            record_count=row["record_count"],
            file_size_in_bytes=row["file_size_in_bytes"],
            value_counts=_as_dict(row["value_counts"]),
            null_value_counts=_as_dict(row["null_value_counts"]),
            lower_bounds=_as_dict(row["lower_bounds"]),
            upper_bounds=_as_dict(row["upper_bounds"]),
        )
        entries.append(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, data_file=data_file))
    return entries


class _Discard:
    """A sink that drops what is written: measures encoding without the file system."""

    def write(self, data: bytes) -> int:
        return len(data)


def _timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds over ``repeat`` runs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
    return wall, cpu


def run_ours(table: pa.Table, output: object, codec: str, repeat: int, threads: int) -> tuple[float, float]:
    schema, spec = table_schema()

    def write() -> None:
        write_manifest(
            output,
            table,
            schema=schema,
            spec=spec,
            snapshot_id=SNAPSHOT_ID,
            codec=codec,
            compression_threads=threads,
        )

    return _timed(write, repeat)


def run_pyiceberg(entries: list[ManifestEntry], path: str, codec: str) -> tuple[float, float]:
    schema, spec = table_schema()

    def write() -> None:
        output = PyArrowFileIO().new_output(path)
        with pyiceberg_write_manifest(2, spec, schema, output, SNAPSHOT_ID, codec) as writer:
            for entry in entries:
                writer.add(entry)

    return _timed(write, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--baseline-entries", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs for ours")
    parser.add_argument("--codecs", default="null,deflate")
    parser.add_argument("--threads", type=int, default=1, help="deflate threads for ours (1: one core)")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    table = make_entries(args.entries)
    baseline = pyiceberg_entries(table.slice(0, args.baseline_entries))
    with tempfile.TemporaryDirectory() as tmp:
        for codec in args.codecs.split(","):
            ours_path, theirs_path = os.path.join(tmp, f"ours-{codec}.avro"), os.path.join(tmp, f"pyi-{codec}.avro")
            runs = [
                ("ours, file", args.entries, run_ours(table, ours_path, codec, args.repeat, args.threads)),
                ("ours, no I/O", args.entries, run_ours(table, _Discard(), codec, args.repeat, args.threads)),
                (
                    "pyiceberg, file",
                    args.baseline_entries,
                    run_pyiceberg(baseline, theirs_path, "gzip" if codec == "deflate" else codec),
                ),
            ]
            sizes = {"ours, file": ours_path, "pyiceberg, file": theirs_path}
            print(f"codec={codec}")
            for label, count, (wall, cpu) in runs:
                size = f"  {os.path.getsize(sizes[label]) / count:.0f} B/entry" if label in sizes else ""
                rates = f"{count / wall:>10,.0f} entries/s (CPU time: {count / cpu:>10,.0f}/s)"
                print(f"  {label + ':':17s} {rates}  {count:>9,} entries{size}")
            ratio = (runs[0][1] / runs[0][2][0]) / (runs[2][1] / runs[2][2][0])
            print(f"  ratio (file, wall): {ratio:.1f}x")


if __name__ == "__main__":
    main()
