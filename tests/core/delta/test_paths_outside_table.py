"""Paths in the log that leave the table: relative data and deletion vector paths that resolve outside the
table root are refused (snapshot loads and commit ranges, so inspect, validate and convert all refuse, nothing
written); absolute ones (shallow clones) are allowed and reported; a DV file is never echoed in a message."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import QueryBuilder, write_deltalake
from support.delta_log import append_commit

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import read_deletion_vector
from airflow_deltaberg.core.errors import CorruptLogError, PathOutsideTableError

UUID_Z85 = "0123456789abcdefghij"  # any 20 Z85 characters decode to a uuid


def make_table(root: Path) -> None:
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))


def outside_file(tmp_path: Path, name: str = "outside.parquet") -> Path:
    """A parquet file next to (not inside) the table folder."""
    path = tmp_path / name
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64())}), path)
    return path


def add_action(path: str, size: int = 100, dv: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1,
                            "dataChange": True, "stats": json.dumps({"numRecords": 2})}
    if dv is not None:
        body["deletionVector"] = dv
    return {"add": body}


def replace_with_dv(root: Path, descriptor: dict[str, Any]) -> int:
    """Commit the table's data file again with a deletion vector (and its remove without one)."""
    part = next(root.glob("part-*.parquet"))
    remove = {"remove": {"path": part.name, "deletionTimestamp": 1, "dataChange": True}}
    return append_commit(root, [remove, add_action(part.name, size=part.stat().st_size, dv=descriptor)])


def iceberg_files(root: Path) -> dict[str, bytes]:
    folder = root / "_iceberg"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def kernel_ids(root: Path) -> list[int]:
    table = deltalake.DeltaTable(str(root))
    return sorted(pa.table(QueryBuilder().register("t", table).execute("select id from t")).column("id").to_pylist())


ESCAPING = ["../outside.parquet", "..%2Foutside.parquet", "%2E%2E/outside.parquet", "%2e%2e%2foutside.parquet",
            "x/../../outside.parquet", "./../outside.parquet", ".."]


# -- relative data paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ESCAPING)
def test_relative_add_path_leaving_the_table_is_refused(tmp_path: Path, path: str) -> None:
    root = tmp_path / "t"
    make_table(root)
    outside_file(tmp_path)
    version = append_commit(root, [add_action(path)])

    with pytest.raises(PathOutsideTableError) as info:
        DeltaTable(str(root)).snapshot()
    error = info.value
    assert isinstance(error, CorruptLogError)
    assert (error.table, error.version) == (str(root), version)
    assert error.file is not None and error.file.endswith(f"{version:020d}.json")
    assert path in str(error) and "add" in str(error) and "outside the table" in str(error)


def test_deltalake_refuses_an_encoded_dot_dot_segment_too(tmp_path: Path) -> None:
    """The oracle: deltalake (object_store) refuses `..%2F` with "illegal character sequence"."""
    root = tmp_path / "t"
    make_table(root)
    outside_file(tmp_path)
    append_commit(root, [add_action("..%2Foutside.parquet")])
    with pytest.raises(Exception, match="illegal character sequence"):
        kernel_ids(root)


def test_remove_path_leaving_the_table_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    make_table(root)
    version = append_commit(root, [{"remove": {"path": "../../etc/passwd", "deletionTimestamp": 1,
                                            "dataChange": True}}])
    with pytest.raises(PathOutsideTableError, match="remove") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == version


def test_commit_range_with_a_path_leaving_the_table_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    make_table(root)
    version = append_commit(root, [add_action("..%2Foutside.parquet")])
    with pytest.raises(PathOutsideTableError) as info:
        DeltaTable(str(root)).commits(1)
    assert info.value.version == version
    assert info.value.file is not None and info.value.file.endswith(f"{version:020d}.json")


@pytest.mark.parametrize("command", ["inspect", "validate", "convert"])
def test_every_command_refuses_and_convert_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          command: str) -> None:
    root = tmp_path / "t"
    make_table(root)
    outside_file(tmp_path)
    append_commit(root, [add_action("../outside.parquet")])

    assert main([command, str(root)]) == 2
    err = capsys.readouterr().err
    assert "PathOutsideTableError" in err and "Traceback" not in err
    assert not (root / "_iceberg").exists()


def test_incremental_conversion_refuses_a_new_commit_leaving_the_table(tmp_path: Path) -> None:
    from airflow_deltaberg.core.iceberg.convert import convert

    root = tmp_path / "t"
    make_table(root)
    assert convert(str(root)).mode == "full"
    before = iceberg_files(root)
    outside_file(tmp_path)
    version = append_commit(root, [add_action("x/../../outside.parquet")])

    with pytest.raises(PathOutsideTableError) as info:
        convert(str(root))
    assert info.value.version == version
    assert iceberg_files(root) == before


def test_dot_segments_that_stay_inside_are_resolved_as_delta_does(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    from airflow_deltaberg.core.iceberg.convert import convert

    root = tmp_path / "t"
    make_table(root)
    (root / "data").mkdir()
    inside = outside_file(root / "data", "x.parquet")
    append_commit(root, [add_action("nowhere/../data/./x.parquet", size=inside.stat().st_size)])

    result = convert(str(root))
    scanned = StaticTable.from_metadata(result.metadata_location).scan()
    assert sorted(str(Path(f.file.file_path)) for f in scanned.plan_files()) == sorted(
        str(p) for p in [inside, *root.glob("part-*.parquet")])
    assert sorted(scanned.to_arrow().column("id").to_pylist()) == kernel_ids(root) == [1, 2, 3, 7, 8]


def test_the_check_resolves_only_paths_that_need_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain relative paths (no dot segment, no encoded dot or slash) are checked column-wise: none of them goes
    through Python, '%' escapes of other characters included."""
    root = tmp_path / "t"
    make_table(root)
    plain = [add_action(f"part=a/plain-{i}.parquet") for i in range(500)]
    append_commit(root, [*plain, add_action("odd%20name.parquet"), add_action("dots..in..name.parquet"),
                      add_action("encoded%2Edot.parquet")])
    import airflow_deltaberg.core.delta.paths as paths_module

    resolved: list[str] = []
    original = paths_module.resolve_relative

    def counting(path: str) -> str:
        resolved.append(path)
        return original(path)

    monkeypatch.setattr(paths_module, "resolve_relative", counting)
    assert DeltaTable(str(root)).snapshot().num_files == 504
    assert sorted(set(resolved)) == ["dots..in..name.parquet", "encoded%2Edot.parquet"]


# -- deletion vector paths --------------------------------------------------------------------------------


def dv(storage_type: str, path_or_inline: str) -> dict[str, Any]:
    return {"storageType": storage_type, "pathOrInlineDv": path_or_inline, "offset": 1, "sizeInBytes": 10,
            "cardinality": 1}


@pytest.mark.parametrize(
    "descriptor",
    [dv("u", "../../" + UUID_Z85), dv("u", "ab/../../" + UUID_Z85), dv("u", "%2E%2E/" + UUID_Z85),
     dv("p", "../deletion_vector.bin"), dv("p", "..%2F..%2Fetc%2Fpasswd")],
    ids=["u-parent", "u-nested-parent", "u-encoded", "p-relative", "p-relative-encoded"],
)
def test_deletion_vector_path_leaving_the_table_is_refused(tmp_path: Path, descriptor: dict[str, Any]) -> None:
    root = tmp_path / "t"
    make_table(root)
    version = replace_with_dv(root, descriptor)
    with pytest.raises(PathOutsideTableError, match="deletion vector") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == version
    # And read directly (no snapshot in between): refused before anything is opened.
    with pytest.raises(PathOutsideTableError):
        read_deletion_vector(str(root), descriptor)


def test_u_deletion_vector_whose_id_holds_dots_and_percent_is_not_a_path(tmp_path: Path) -> None:
    """The last 20 characters of a `u` DV are a Z85 uuid, whose alphabet has '.', '/' and '%': only the
    prefix before them is a path."""
    root = tmp_path / "t"
    make_table(root)
    replace_with_dv(root, dv("u", "ab" + "../%/........%%%%%%%"))
    assert DeltaTable(str(root)).snapshot().num_files == 1


def test_absolute_p_deletion_vector_on_a_local_file_never_echoes_its_bytes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    make_table(root)
    system_file = tmp_path / "passwd"
    system_file.write_bytes(b"root:x:0:0:TOPSECRET:/root:/bin/bash\n")
    descriptor = dv("p", system_file.as_uri())
    replace_with_dv(root, descriptor)
    DeltaTable(str(root)).snapshot()  # allowed: absolute like a shallow clone's

    with pytest.raises(CorruptLogError) as info:
        read_deletion_vector(str(root), descriptor)
    message = str(info.value)
    assert "is not a deletion vector file (bad version byte)" in message
    assert str(ord("r")) not in message and "TOPSECRET" not in message and "root:" not in message


# -- absolute paths: allowed, reported --------------------------------------------------------------------


def test_absolute_paths_outside_the_root_are_reported_by_validate_and_convert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pyiceberg.table import StaticTable

    from airflow_deltaberg.core.iceberg.convert import convert

    root = tmp_path / "t"
    make_table(root)
    clone_source = tmp_path / "source"
    clone_source.mkdir()
    files = [outside_file(clone_source, f"f{i}.parquet") for i in range(4)]
    inside = next(root.glob("part-*.parquet"))
    append_commit(root, [add_action(files[0].as_uri(), size=files[0].stat().st_size),
                      add_action(f"file:{files[1]}", size=files[1].stat().st_size),
                      add_action(str(files[2]), size=files[2].stat().st_size),
                      add_action(f"file://{root}/../source/f3.parquet", size=files[3].stat().st_size),
                      # absolute but inside: not reported
                      add_action(f"file://{inside}", size=inside.stat().st_size),
                      {"remove": {"path": inside.name, "deletionTimestamp": 1, "dataChange": True}}])

    report = validate(str(root), "compat-v2")
    [warning] = [v for v in report.violations if v.rule_id == "paths.files-outside-table"]
    assert warning.severity.value == "warning"
    assert "paths.files-outside-table" not in {v.rule_id for v in report.errors}
    assert "4 data file(s)" in warning.message and files[0].name in warning.message
    for level in ("compat-v1", "compat-v2", "writer-compat-v1"):
        assert "paths.files-outside-table" in {v.rule_id for v in validate(str(root), level).violations}

    result = convert(str(root))
    assert result.files_outside_table == 4 and result.files_added == 5
    iceberg_ids = StaticTable.from_metadata(result.metadata_location).scan().to_arrow().column("id").to_pylist()
    assert sorted(iceberg_ids) == kernel_ids(root) == sorted([1, 2, 3] + [7, 8] * 4)

    shutil.rmtree(root / "_iceberg")
    assert main(["convert", str(root)]) == 0
    assert "files outside the table root: 4" in capsys.readouterr().out


def test_absolute_paths_inside_the_root_are_not_reported(tmp_path: Path) -> None:
    root = tmp_path / "t"
    make_table(root)
    report = validate(str(root), "compat-v2")
    assert "paths.files-outside-table" not in {v.rule_id for v in report.violations}


def test_paths_module_classifies_locations() -> None:
    from airflow_deltaberg.core.delta.paths import is_outside_root, resolve_relative

    assert resolve_relative("a/./b/../c%20d.parquet") == "a/c d.parquet"
    with pytest.raises(ValueError):
        resolve_relative("a/../../b")
    root = "s3://bucket/t"
    assert not is_outside_root("s3://bucket/t/x.parquet", root)
    assert not is_outside_root("s3a://bucket/t/x.parquet", root)
    assert is_outside_root("s3://bucket/t/../u/x.parquet", root)
    assert is_outside_root("s3://bucket/tt/x.parquet", root)
    assert is_outside_root("s3://other/t/x.parquet", root)
    assert is_outside_root("file:///etc/passwd", root)
    local = os.path.abspath("/data/t")
    assert not is_outside_root("file:/data/t/a%20b.parquet", local)
    assert is_outside_root("/data/t2/x.parquet", local)


def test_incremental_conversion_counts_the_new_files_outside_the_root(tmp_path: Path) -> None:
    from airflow_deltaberg.core.iceberg.convert import convert

    root = tmp_path / "t"
    make_table(root)
    assert convert(str(root)).files_outside_table == 0
    elsewhere = outside_file(tmp_path)
    append_commit(root, [add_action(elsewhere.as_uri(), size=elsewhere.stat().st_size)])
    result = convert(str(root))
    assert (result.mode, result.files_added, result.files_outside_table) == ("incremental", 1, 1)
    assert result.to_dict()["files_outside_table"] == 1
