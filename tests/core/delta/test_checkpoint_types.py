"""Parquet checkpoints whose columns have other types than the protocol's checkpoint schema (issue 11, classes
D07/D13 of the fuzz catalogue): `add` or `remove` that are not structs, `add.partitionValues` a string,
`add.stats` binary or a number, `add.deletionVector` a string, `metaData` or `metaData.format` strings... They
escaped as TypeError, AttributeError, ArrowNotImplementedError or IndexError; now the checkpoint is refused with a
CorruptLogError naming the table, version, checkpoint file and column, before anything is read from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError

CHECKPOINT = "00000000000000000001.checkpoint.parquet"


def make_table(tmp_path: Path) -> Path:
    """Two appends to a table partitioned by ``p``, and a checkpoint at version 1 (written by deltalake)."""
    root = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array(["a", "b"])})
    write_deltalake(str(root), data, partition_by=["p"])
    write_deltalake(str(root), data, mode="append", partition_by=["p"])
    deltalake.DeltaTable(str(root)).create_checkpoint()
    return root


def _as(value: Any, typ: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_string(typ):
        return value if isinstance(value, str) else json.dumps(value, default=str)
    if pa.types.is_binary(typ):
        return (value if isinstance(value, str) else json.dumps(value, default=str)).encode()
    if pa.types.is_integer(typ):
        return 7
    raise AssertionError(typ)


def retype(array: pa.Array, path: list[str], typ: pa.DataType) -> pa.Array:
    """``array`` with the field at ``path`` (below it) given the type ``typ`` (its values converted by _as)."""
    if not path:
        return pa.array([_as(v, typ) for v in array.to_pylist()], typ)
    struct = array
    fields = []
    for i, f in enumerate(struct.type):
        child = struct.field(i)
        if f.name == path[0]:
            child = retype(child, path[1:], typ)
            f = pa.field(f.name, child.type)
        fields.append((f, child))
    return pa.StructArray.from_arrays([c for _, c in fields], fields=[f for f, _ in fields], mask=struct.is_null())


def retype_column(checkpoint: Path, column: str, typ: pa.DataType) -> None:
    data = pq.read_table(checkpoint)
    top, *rest = column.split(".")
    new = retype(data.column(top).combine_chunks(), rest, typ)
    data = data.set_column(data.schema.get_field_index(top), pa.field(top, new.type), new)
    pq.write_table(data, checkpoint)


RETYPED = [
    ("add", pa.string()),
    ("remove", pa.string()),
    ("metaData", pa.string()),
    ("protocol", pa.string()),
    ("add.path", pa.binary()),
    ("add.partitionValues", pa.string()),
    ("add.size", pa.string()),
    ("add.stats", pa.binary()),
    ("add.stats", pa.int64()),
    ("add.deletionVector", pa.string()),
    ("add.tags", pa.string()),
    ("metaData.format", pa.string()),
    ("metaData.configuration", pa.string()),
    ("metaData.partitionColumns", pa.string()),
    ("protocol.minReaderVersion", pa.string()),
]


@pytest.mark.parametrize(("column", "typ"), RETYPED, ids=[f"{c}-{t}" for c, t in RETYPED])
def test_a_checkpoint_column_of_another_type_is_refused(
    tmp_path: Path, column: str, typ: pa.DataType, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    checkpoint = root / "_delta_log" / CHECKPOINT
    retype_column(checkpoint, column, typ)

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot().files  # noqa: B018 - stats read too
    error = info.value
    assert (error.table, error.version) == (str(root), 1)
    assert error.file is not None and error.file.endswith(CHECKPOINT)
    assert f"column {column} has the type {typ}" in str(error), str(error)
    for command in ("inspect", "validate", "convert"):
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and "unexpected" not in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "_iceberg").exists()


def test_integer_widths_and_large_strings_are_accepted(tmp_path: Path) -> None:
    """Other writers may store a version as int32 or a string as large_string: the values are the same."""
    root = make_table(tmp_path)
    checkpoint = root / "_delta_log" / CHECKPOINT
    data = pq.read_table(checkpoint)
    widened = []
    for field in data.schema:
        t = field.type
        if pa.types.is_struct(t):
            t = pa.struct([pa.field(f.name, pa.large_string() if pa.types.is_string(f.type) else f.type)
                           for f in t])
        widened.append(pa.field(field.name, t))
    pq.write_table(data.cast(pa.schema(widened)), checkpoint)
    assert pq.read_schema(checkpoint).field("add").type.field("path").type == pa.large_string()
    assert DeltaTable(str(root)).snapshot().num_files == 4


def test_a_checkpoint_without_file_action_columns_is_still_read(tmp_path: Path) -> None:
    """A missing column is not a wrong type: a checkpoint of a table without files has no add values at all."""
    root = make_table(tmp_path)
    checkpoint = root / "_delta_log" / CHECKPOINT
    data = pq.read_table(checkpoint)
    pq.write_table(data.drop_columns(["remove"]), checkpoint)
    assert DeltaTable(str(root)).snapshot().num_files == 4


def test_a_damaged_checkpoint_footer_is_refused_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow's text for a footer it cannot decode ends with a newline ("Couldn't deserialize thrift: ...\\n"):
    the message keeps one line (the CLI prints one line per error)."""
    root = make_table(tmp_path)
    checkpoint = root / "_delta_log" / CHECKPOINT
    data = bytearray(checkpoint.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    data[footer] ^= 0xFF  # the first byte of the footer's thrift
    checkpoint.write_bytes(bytes(data))

    with pytest.raises(CorruptLogError, match="cannot be read") as info:
        DeltaTable(str(root)).snapshot()
    assert "\n" not in str(info.value) and info.value.file is not None and info.value.file.endswith(CHECKPOINT)
    for command in ("inspect", "convert"):
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and len(err.strip().splitlines()) == 1, err
