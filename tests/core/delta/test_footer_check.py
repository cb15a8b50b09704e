"""footer_check: Parquet footers pyarrow would abort the process on (size statistics that do not fit the schema)
are refused with typed errors, for a checkpoint (CorruptLogError) and a data file (CorruptDataFileError).

Found by the fuzz suite (seed 91127, case 7061): a checkpoint with flipped bytes whose level histogram had one entry
too many made ``FileMetaData.row_group(g).column(i)`` end the process with SIGABRT."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import airflow_deltaberg.core.delta.file_checks.footer_check as footer_check
from airflow_deltaberg.core.delta.file_checks.file_footer import read_file_footer
from airflow_deltaberg.core.errors import CorruptDataFileError
from airflow_deltaberg.core.storage import open_storage

PROBE = "import sys, pyarrow.parquet as pq; m = pq.read_metadata(sys.argv[1]); " \
        "[m.row_group(g).column(i) for g in range(m.num_row_groups) for i in range(m.num_columns)]"


def _one_more_histogram_level(data: bytes) -> bytes:
    """``data`` (a Parquet file) with one more level in the first definition level histogram of its footer."""
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    reserialized = pa.BufferOutputStream()
    pq.read_metadata(io.BytesIO(data)).write_metadata_file(reserialized)
    assert reserialized.getvalue().to_pybytes()[4:-8] == footer  # positions found in the one hold in the other
    starts: list[int] = []
    read_size_statistics = footer_check._size_statistics

    def spy(reader: footer_check._Reader) -> tuple[int, int, bool]:
        starts.append(reader.pos)
        return read_size_statistics(reader)

    footer_check._size_statistics = spy
    try:
        footer_check._file_problem(footer_check._Reader(footer), [footer_check._Column(9, 9, None)] * 10_000)
    finally:
        footer_check._size_statistics = read_size_statistics
    for start in starts:
        reader = footer_check._Reader(footer)
        reader.pos = start
        for field_id, kind in reader.fields():
            if field_id == 3 and kind == footer_check._LIST:
                header = reader.pos
                size, element = reader.list_header()
                if not 0 < size < 14:
                    break
                for _ in range(size):
                    reader.skip_element(element, 1)
                patched = (footer[:header] + bytes([footer[header] + 0x10]) + footer[header + 1:reader.pos] + b"\x00"
                           + footer[reader.pos:])
                return data[:-8 - length] + patched + (length + 1).to_bytes(4, "little") + data[-4:]
            reader.skip(kind)
    raise AssertionError("no definition level histogram in the footer")


def test_a_data_file_with_a_bad_histogram_is_a_typed_error(tmp_path: Path) -> None:
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([1, None, 3], pa.int64())}), sink)
    damaged = tmp_path / "part-0.parquet"
    damaged.write_bytes(_one_more_histogram_level(sink.getvalue()))
    # What pyarrow does with it: the data read raises, the column chunk's metadata ends the process.
    with pytest.raises(OSError, match="histogram size mismatch"):
        pq.read_table(damaged)
    probe = subprocess.run([sys.executable, "-c", PROBE, str(damaged)], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "histogram size mismatch" in probe.stderr
    problem = footer_check.footer_problem(pq.read_metadata(damaged))
    assert problem == ("has size statistics with a definition level histogram of 3 levels for a column of 2 "
                       "(row group 0, column 0)")
    with pytest.raises(CorruptDataFileError) as info:
        read_file_footer(open_storage(str(tmp_path)), str(damaged), table=str(tmp_path))
    assert "definition level histogram" in str(info.value) and "part-0.parquet" in str(info.value)
    assert footer_check.footer_problem(pq.read_metadata(sink)) is None


def test_a_checkpoint_with_a_bad_histogram_is_refused_by_convert(tmp_path: Path) -> None:
    """The whole command in a process of its own (an abort would end this one): exit 2 with a CorruptLogError
    naming the checkpoint, where it ended with SIGABRT."""
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"]}))
    deltalake.write_deltalake(str(root), pa.table({"id": pa.array([4], pa.int64()), "s": ["d"]}), mode="append")
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = next((root / "_delta_log").glob("*.checkpoint.parquet"))
    rewritten = io.BytesIO()
    pq.write_table(pq.read_table(checkpoint), rewritten)  # pyarrow writes size statistics for every column
    checkpoint.write_bytes(_one_more_histogram_level(rewritten.getvalue()))
    probe = subprocess.run([sys.executable, "-c", PROBE, str(checkpoint)], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0
    run = subprocess.run([sys.executable, "-m", "airflow_deltaberg.cli", "convert", str(root), "--full"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "CorruptLogError" in run.stderr and checkpoint.name in run.stderr and "histogram" in run.stderr
    assert not (root / "_iceberg").exists() or not list((root / "_iceberg").rglob("*.metadata.json"))


def test_statistics_shorter_than_a_value_are_a_typed_error(tmp_path: Path) -> None:
    """A min of 7 bytes for an INT64 column: pyarrow's ``.statistics`` ends the process ("Unexpected end of
    stream"); the footer check names it first."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([1, None, 3], pa.int64())}), sink)
    data = sink.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    one = (1).to_bytes(8, "little")
    assert footer.count(b"\x08" + one) == 2  # the legacy min and min_value, each a length then 8 bytes
    short = footer.replace(b"\x08" + one, b"\x07" + one[:7])
    damaged = tmp_path / "part-0.parquet"
    damaged.write_bytes(data[:-8 - length] + short + len(short).to_bytes(4, "little") + data[-4:])
    probe = subprocess.run([sys.executable, "-c", PROBE.replace(".column(i)", ".column(i).statistics"),
                            str(damaged)], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "Unexpected end of stream" in probe.stderr
    assert footer_check.footer_problem(pq.read_metadata(damaged)) == (
        "has statistics whose min has 7 bytes for values of 8 (row group 0, column 0)")
    with pytest.raises(CorruptDataFileError, match="statistics whose min has 7 bytes"):
        read_file_footer(open_storage(str(tmp_path)), str(damaged), table=str(tmp_path))


@pytest.mark.parametrize("command", ["inspect", "validate", "convert"])
def test_a_checkpoint_column_name_that_is_not_utf8_is_a_typed_error(command: str, tmp_path: Path) -> None:
    """Fuzz seed 5 case 3110: flipped footer bytes made a column name invalid UTF-8, and pyarrow's schema read
    raised UnicodeDecodeError, which escaped untyped. Now a CorruptLogError naming the checkpoint (exit 2)."""
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = next((root / "_delta_log").glob("*.checkpoint.parquet"))
    data = checkpoint.read_bytes()
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    name = data.index(b"minReaderVersion", footer_start)
    checkpoint.write_bytes(data[:name + 3] + b"\xd2" + data[name + 4:])  # same length, no longer UTF-8
    with pytest.raises(UnicodeDecodeError):
        pq.ParquetFile(checkpoint).schema_arrow  # noqa: B018 (what the reader did before)
    run = subprocess.run([sys.executable, "-m", "airflow_deltaberg.cli", command, str(root)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "CorruptLogError" in run.stderr and checkpoint.name in run.stderr and "UnicodeDecodeError" not in run.stderr
    assert not (root / "_iceberg").exists()


def _int32_chunk_as_int96(data: bytes) -> bytes:
    """``data`` (a Parquet file) whose first INT32 column chunk says INT96 in its footer (ColumnChunk's meta_data
    struct begins with its physical type: field 1, i32, zigzag 2 for INT32, 6 for INT96)."""
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.index(b"\x1c\x15\x02", start)
    return data[:at + 2] + b"\x06" + data[at + 3:]


def test_a_column_chunk_of_another_physical_type_is_a_typed_error(tmp_path: Path) -> None:
    """Fuzz seed 8 case 1927: a flipped footer byte made a checkpoint's INT32 column chunk say INT96, and building the
    chunk's metadata (for its statistics) ended the process ('ColumnMetaData type does not match ColumnDescriptor
    physical type')."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"v": pa.array([1, 2, 3], pa.int32())}), sink)
    damaged = tmp_path / "part-0.parquet"
    damaged.write_bytes(_int32_chunk_as_int96(sink.getvalue()))
    statistics = PROBE.replace(".column(i) for", ".column(i).statistics for")
    probe = subprocess.run([sys.executable, "-c", statistics, str(damaged)], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "does not match ColumnDescriptor physical type" in probe.stderr
    assert footer_check.footer_problem(pq.read_metadata(damaged)) == (
        "has a column chunk of physical type INT96 where the schema's column is INT32 (row group 0, column 0)")
    with pytest.raises(CorruptDataFileError, match="physical type INT96") as info:
        read_file_footer(open_storage(str(tmp_path)), str(damaged), table=str(tmp_path))
    assert "part-0.parquet" in str(info.value)
    assert footer_check.footer_problem(pq.read_metadata(sink)) is None
