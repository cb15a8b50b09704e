"""Manifest write: our column-at-a-time Avro encoder against fastavro, v2 and v3 manifests.

The entries are bench_manifest_write.py's (20 long columns with counts and bounds, one int partition field).
fastavro writes the same records (read back from our manifest with fastavro, so the same Avro schema and values)
with the same codec and zlib level 1; its rate is given twice: records already Python dicts (only the encoding
timed), and from the Arrow table (``to_pylist`` plus the encoding: what a writer starting from our Arrow entries
pays). Both write to a discarding sink; both files are checked to read back as the same records.

    python benchmarks/bench_manifest_fastavro.py --entries 25000
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa
from bench_manifest_write import SNAPSHOT_ID, _timed, make_entries, table_schema

from airflow_deltaberg.core.iceberg.manifests.manifest import write_manifest


class _Discard(io.RawIOBase):
    """A sink that drops what is written (a stream fastavro accepts): encoding without the file system."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


def ours(table: pa.Table, output: Any, codec: str, version: int) -> None:
    schema, spec = table_schema()
    write_manifest(output, table, schema=schema, spec=spec, snapshot_id=SNAPSHOT_ID, codec=codec,
                   compression_threads=1, format_version=version)


def avro_records(data: bytes) -> tuple[dict[str, Any], dict[str, bytes], list[dict[str, Any]]]:
    """The writer schema, the user metadata and the records of an Avro file."""
    reader = fastavro.reader(io.BytesIO(data))
    meta = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    return reader.writer_schema, meta, list(reader)


def to_records(table: pa.Table) -> Iterator[dict[str, Any]]:
    """Our Arrow entries as the nested dicts fastavro takes (maps as lists of key/value records)."""
    for row in table.to_pylist():
        yield {"status": row["status"], "snapshot_id": row["snapshot_id"], "sequence_number": None,
               "file_sequence_number": None,
               "data_file": {"content": 0, "file_path": row["file_path"], "file_format": "PARQUET",
                             "partition": {"part": row["partition"]["part"]}, "record_count": row["record_count"],
                             "file_size_in_bytes": row["file_size_in_bytes"],
                             "value_counts": row["value_counts"], "null_value_counts": row["null_value_counts"],
                             "lower_bounds": row["lower_bounds"], "upper_bounds": row["upper_bounds"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=25_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--codecs", default="null,deflate")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.entries:,} entries, "
          f"fastavro {fastavro.__version__}; best of {args.repeat}, wall (CPU) ms")
    table = make_entries(args.entries)
    print(f"{'':16} {'ours':>16} {'fastavro, dicts':>18} {'fastavro, Arrow':>18} {'dicts/ours':>11} {'Arrow/ours':>11}")
    for version in (2, 3):
        for codec in args.codecs.split(","):
            written = io.BytesIO()
            ours(table, written, codec, version)
            schema, meta, records = avro_records(written.getvalue())
            parsed = fastavro.parse_schema(schema)

            def fast(rows: Any, output: Any, parsed: Any = parsed, meta: Any = meta, codec: str = codec) -> None:
                fastavro.writer(output, parsed, rows, codec=codec, metadata=meta, codec_compression_level=1)

            check = io.BytesIO()
            fast(records, check)
            assert avro_records(check.getvalue())[2] == records
            check = io.BytesIO()
            fast(to_records(table), check)  # fields it leaves out are null in both versions' schemas
            assert avro_records(check.getvalue())[2] == records
            ours_t = _timed(lambda: ours(table, _Discard(), codec, version), args.repeat)  # noqa: B023
            dicts_t = _timed(lambda: fast(records, _Discard()), args.repeat)  # noqa: B023
            arrow_t = _timed(lambda: fast(to_records(table), _Discard()), args.repeat)  # noqa: B023

            def ms(t: tuple[float, float]) -> str:
                return f"{t[0] * 1e3:7.1f} ({t[1] * 1e3:6.1f})"

            print(f"v{version} {codec:12} {ms(ours_t):>16} {ms(dicts_t):>18} {ms(arrow_t):>18} "
                  f"{dicts_t[0] / ours_t[0]:10.1f}x {arrow_t[0] / ours_t[0]:10.1f}x")


if __name__ == "__main__":
    main()
