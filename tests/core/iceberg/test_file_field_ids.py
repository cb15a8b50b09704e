"""Data files whose Parquet field ids disagree with the converted schema: Iceberg readers resolve columns by field id
(by the name mapping only in a file without any), Delta readers by name. ``convert --verify-stats`` reads every
footer, and refuses such a file; without it the converted table reads other columns (shown below with pyiceberg)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from pyiceberg.table.name_mapping import MappedField, NameMapping
from support.delta_log import commit_file, edit_commit, read_actions
from support.tables import iceberg_files

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.file_field_ids import field_id_conflicts
from airflow_deltaberg.core.iceberg.schema import CHANGE_TYPE_FIELD_ID

MAPPING = NameMapping([
    MappedField(field_id=1, names=["a"]),
    MappedField(field_id=2, names=["b"]),
    MappedField(field_id=3, names=["l"], fields=[MappedField(field_id=4, names=["element"])]),
    MappedField(field_id=5, names=["m"], fields=[MappedField(field_id=6, names=["key"]),
                                                 MappedField(field_id=7, names=["value"])]),
    MappedField(field_id=8, names=["s"], fields=[MappedField(field_id=9, names=["x"])]),
    MappedField(field_id=CHANGE_TYPE_FIELD_ID, names=["_change_type"]),  # as convert_schema maps it
])


def _f(name: str, t: pa.DataType, field_id: int | None, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable, metadata=None if field_id is None else {FIELD_ID: str(field_id).encode()})


def _schema(ids: dict[str, int | None]) -> pa.Schema:
    element = _f("element", pa.int32(), ids.get("element"))
    key, value = _f("key", pa.string(), ids.get("key"), nullable=False), _f("value", pa.int64(), ids.get("value"))
    return pa.schema([
        _f("a", pa.int64(), ids.get("a")), _f("b", pa.string(), ids.get("b")),
        _f("l", pa.list_(element), ids.get("l")),
        _f("m", pa.map_(key, value), ids.get("m")),
        _f("s", pa.struct([_f("x", pa.int32(), ids.get("x"))]), ids.get("s")),
    ])


AGREE = {"a": 1, "b": 2, "l": 3, "element": 4, "m": 5, "key": 6, "value": 7, "s": 8, "x": 9}


def test_no_field_ids_or_the_same_ones_agree() -> None:
    assert field_id_conflicts(_schema({}), MAPPING) == []
    assert field_id_conflicts(_schema(AGREE), MAPPING) == []
    # A column the table does not have (the change data feed's among them), without an id or with one no column has:
    # skipped by both readers.
    extra = _schema(AGREE).append(_f("_change_type", pa.string(), None)).append(_f("z", pa.int64(), 99))
    assert field_id_conflicts(extra, MAPPING) == []


@pytest.mark.parametrize(("ids", "expected"), [
    ({**AGREE, "a": 2, "b": 1}, ["column a has field id 2 (column b), the converted schema gives it 1",
                                 "column b has field id 1 (column a), the converted schema gives it 2"]),
    ({**AGREE, "b": None}, ["column b has no field id where the file's other columns have one (Iceberg readers skip "
                            "it)"]),
    ({"element": 4}, [f"column {c} has no field id where the file's other columns have one (Iceberg readers skip "
                      "it)" for c in ("a", "b", "l", "m", "s")]),
    ({**AGREE, "element": 40}, ["column l.element has field id 40, the converted schema gives it 4"]),
    ({**AGREE, "key": 7, "value": 6},
     ["column m.key has field id 7 (column m.value), the converted schema gives it 6",
      "column m.value has field id 6 (column m.key), the converted schema gives it 7"]),
    ({**AGREE, "x": 1}, ["column s.x has field id 1 (column a), the converted schema gives it 9"]),
], ids=["swapped", "one-missing", "only-nested", "element", "map-parts", "struct-child"])
def test_field_ids_that_resolve_to_other_columns(ids: dict[str, int | None], expected: list[str]) -> None:
    assert field_id_conflicts(_schema(ids), MAPPING) == expected


def test_an_unknown_file_column_with_the_id_of_a_column_is_a_conflict() -> None:
    schema = pa.schema([_f("a", pa.int64(), 1), _f("old_b", pa.string(), 2)])
    assert field_id_conflicts(schema, MAPPING) == ["file column old_b has field id 2, the id of column b"]


def _swap_ids(root: Path, version: int) -> Path:
    """The data file added by ``version`` rewritten with the field ids of a and b swapped (its add's size updated;
    its rows and stats unchanged)."""
    added = [a["add"]["path"] for a in read_actions(commit_file(root, version)) if "add" in a]
    data_file = root / added[0]
    rows = pq.read_table(data_file)
    swapped = pa.schema([rows.schema.field("a").with_metadata({FIELD_ID: b"2"}),
                         rows.schema.field("b").with_metadata({FIELD_ID: b"1"})])
    pq.write_table(rows.cast(swapped), data_file)

    def resize(actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                action["add"]["size"] = data_file.stat().st_size

    edit_commit(root, version, resize)
    return data_file


def _rows(start: int) -> pa.Table:
    return pa.table({"a": pa.array([start, start + 1], pa.int64()), "b": pa.array([10 * start, 10 * start + 10],
                                                                                  pa.int64())})


def _with_swapped_ids(tmp_path: Path) -> tuple[Path, Path]:
    """A deltalake table (no column mapping) whose one data file has the field ids of a and b swapped."""
    root = tmp_path / "t"
    write_deltalake(str(root), _rows(1))
    return root, _swap_ids(root, 0)


def test_an_incremental_conversion_checks_the_added_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    write_deltalake(str(root), _rows(1))
    assert convert(str(root), verify_stats=True).delta_version == 0
    before = iceberg_files(root)
    write_deltalake(str(root), _rows(3), mode="append")
    data_file = _swap_ids(root, 1)
    with pytest.raises(StatsMismatchError, match="column a has field id 2") as info:
        convert(str(root), verify_stats=True)
    assert info.value.file is not None and info.value.file.endswith(data_file.name)
    assert iceberg_files(root) == before


def test_verify_stats_refuses_a_file_whose_ids_swap_two_columns(tmp_path: Path) -> None:
    root, data_file = _with_swapped_ids(tmp_path)
    swapped = "column a has field id 2 .column b., the converted schema gives it 1"
    with pytest.raises(StatsMismatchError, match=swapped) as info:
        convert(str(root), verify_stats=True)
    assert info.value.file is not None and info.value.file.endswith(data_file.name)
    assert not (root / "_iceberg").exists()


def test_without_the_check_iceberg_readers_read_the_columns_swapped(tmp_path: Path) -> None:
    """Why the check: converted without it, pyiceberg returns a's values as b and b's as a."""
    root, _ = _with_swapped_ids(tmp_path)
    result = convert(str(root))
    mapping = json.loads(StaticTable.from_metadata(result.metadata_location).properties["schema.name-mapping.default"])
    assert {m["names"][0]: m["field-id"] for m in mapping if m["names"][0] in "ab"} == {"a": 1, "b": 2}
    read = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    assert sorted(zip(read.column("a").to_pylist(), read.column("b").to_pylist(), strict=True)) == [(10, 1), (20, 2)]
