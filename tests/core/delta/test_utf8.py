"""Strings of the log that are not UTF-8 (issue 11, classes D02/D15 of the fuzz catalogue): a garbled byte in a
commit, a JSON escape of a lone surrogate (``"\\ud800"``, which the JSON readers turn into bytes that are not
UTF-8, or into a Python string that cannot be encoded), or invalid bytes in a Parquet checkpoint's string columns.
They escaped as UnicodeDecodeError / UnicodeEncodeError from many places; now the log reader refuses them once,
with a CorruptLogError naming the table, version, file (and line of a commit). Valid non-ASCII text (raw UTF-8,
escaped surrogate pairs) stays readable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from support.delta_log import commit_file

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError


def make_table(tmp_path: Path, text: list[str] | None = None) -> Path:
    root = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array(text or ["a", "b"])})
    write_deltalake(str(root), data)
    write_deltalake(str(root), data, mode="append")
    return root


def replace_in_line(path: Path, kind: str, old: bytes, new: bytes) -> int:
    """Replace ``old`` by ``new`` (raw bytes) in the first line holding a ``kind`` action; returns its number."""
    lines = path.read_bytes().split(b"\n")
    number = next(i for i, line in enumerate(lines) if line.startswith(b'{"' + kind.encode()))
    assert old in lines[number]
    lines[number] = lines[number].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))
    return number + 1


def assert_refused(root: Path, version: int, words: tuple[str, ...], capsys: pytest.CaptureFixture[str],
                   file: str | None = None, commands: tuple[str, ...] = ("inspect", "validate", "convert")) -> None:
    name = file or commit_file(root, version).name
    loads: list[Callable[[], object]] = [lambda: DeltaTable(str(root)).snapshot().files]
    if file is None:
        loads.append(lambda: DeltaTable(str(root)).commits(version))
    for load in loads:
        with pytest.raises(CorruptLogError) as info:
            load()
        error = info.value
        assert (error.table, error.version) == (str(root), version)
        assert error.file is not None and error.file.endswith(name), error.file
        for word in words:
            assert word in str(error), str(error)
    for command in commands:
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and "unexpected" not in err and str(root) in err, err
    assert not (root / "_iceberg").exists()


# -- commits -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "old", "new"), [
    ("add", b'"path":"', b'"path":"\xfe'),  # in the path
    ("add", b'\\"numRecords', b'\\"\x80numRecords'),  # inside the stats string
    ("commitInfo", b'"operation":"', b'"operation":"\xe7t'),  # in another action
])
def test_a_byte_that_is_not_utf8_is_refused(
    tmp_path: Path, kind: str, old: bytes, new: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    line = replace_in_line(commit_file(root, 1), kind, old, new)
    assert_refused(root, 1, (f"line {line}", "UTF-8"), capsys)


@pytest.mark.parametrize(("kind", "old", "new"), [
    ("add", b'"path":"', b'"path":"\\ud800'),  # a lone high surrogate
    ("add", b'"path":"', b'"path":"\\uDC00'),  # a lone low surrogate
    ("add", b'\\"numRecords', b'\\"\\\\ud800numRecords'),  # escaped inside the stats JSON
    ("commitInfo", b'"operation":"', b'"operation":"\\ud83d'),  # the first half of a pair
])
def test_an_escaped_lone_surrogate_is_refused(
    tmp_path: Path, kind: str, old: bytes, new: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    line = replace_in_line(commit_file(root, 1), kind, old, new)
    assert_refused(root, 1, (f"line {line}", "surrogate"), capsys)


def test_a_lone_surrogate_in_the_metadata_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_table(tmp_path)
    line = replace_in_line(commit_file(root, 0), "metaData", b'"id":"', b'"id":"\\ud800')
    assert_refused(root, 0, (f"line {line}", "surrogate"), capsys)


def test_valid_non_ascii_text_stays_readable(tmp_path: Path) -> None:
    """Raw UTF-8 (é, an emoji) in values and stats, and an escaped surrogate pair (a valid emoji)."""
    root = make_table(tmp_path, ["é", "\N{GRINNING FACE}"])
    commit = commit_file(root, 1)
    line = replace_in_line(commit, "commitInfo", b'"operation":"', b'"operation":"\\ud83d\\ude00 ')
    assert line == 1
    snapshot = DeltaTable(str(root)).snapshot()
    assert snapshot.num_files == 2
    stats = snapshot.files.column("stats_parsed").to_pylist()
    assert {s["maxValues"]["s"] for s in stats} == {"\N{GRINNING FACE}"}
    assert snapshot.commit_info["operation"].startswith("\N{GRINNING FACE}")
    assert DeltaTable(str(root)).commits(1).actions.file_actions.num_rows == 1


# -- checkpoints -------------------------------------------------------------------------------------------------


def garble_checkpoint_column(checkpoint: Path, column: str, field: str) -> None:
    """Put a byte that is not UTF-8 into the first non-null value of ``column``.``field`` (a string)."""
    data = pq.read_table(checkpoint)
    struct = data.column(column).combine_chunks()
    values = struct.field(field)
    valid = struct.is_valid().to_pylist()
    row = next(i for i, v in enumerate(values.to_pylist()) if v is not None and valid[i])
    raw = [v.encode() if v is not None else None for v in values.to_pylist()]
    raw[row] = b"\xfe" + raw[row]
    garbled = pa.array(raw, pa.binary()).view(pa.string())  # no UTF-8 check: the bytes go in as they are
    fields = [garbled if f.name == field else struct.field(i) for i, f in enumerate(struct.type)]
    rebuilt = pa.StructArray.from_arrays(fields, fields=list(struct.type), mask=struct.is_null())
    pq.write_table(data.set_column(data.schema.get_field_index(column), data.schema.field(column), rebuilt),
                   checkpoint)


@pytest.mark.parametrize(("column", "field"), [("add", "path"), ("add", "stats"), ("metaData", "id")])
def test_a_checkpoint_string_that_is_not_utf8_is_refused(
    tmp_path: Path, column: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = root / "_delta_log" / "00000000000000000001.checkpoint.parquet"
    garble_checkpoint_column(checkpoint, column, field)
    # validate without data checks reads no stats: only the commands that do are refused for them.
    commands = ("inspect", "convert") if field == "stats" else ("inspect", "validate", "convert")
    assert_refused(root, 1, ("UTF-8",), capsys, file=checkpoint.name, commands=commands)


def test_a_checkpoint_with_valid_non_ascii_text_stays_readable(tmp_path: Path) -> None:
    root = make_table(tmp_path, ["é", "\N{GRINNING FACE}"])
    deltalake.DeltaTable(str(root)).create_checkpoint()
    snapshot = DeltaTable(str(root)).snapshot()
    assert {s["maxValues"]["s"] for s in snapshot.files.column("stats_parsed").to_pylist()} == {"\N{GRINNING FACE}"}


def test_the_garbled_commit_is_named_when_a_checkpoint_precedes_it(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    deltalake.DeltaTable(str(root)).create_checkpoint()
    write_deltalake(str(root), pa.table({"id": pa.array([3], pa.int64()), "s": pa.array(["c"])}), mode="append")
    replace_in_line(commit_file(root, 2), "add", b'"path":"', b'"path":"\xfe')
    with pytest.raises(CorruptLogError, match="UTF-8") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 2
    assert json.loads(commit_file(root, 1).read_text().splitlines()[0])  # the earlier commit is untouched
