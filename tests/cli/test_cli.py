"""`deltaberg inspect` and `convert` on tables written by deltalake: the first as a real process, the others as
``cli.main`` in this process (``deltaberg_here``: the same output and exit code, without a process start each)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as PeerTable
from deltalake import write_deltalake
from support.cli import deltaberg_here, run_deltaberg


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    for part, values in (("a", [1, 2, 3]), ("b", [4, 5])):
        data = pa.table({"kind": [part] * len(values), "value": pa.array(values, pa.int64())})
        write_deltalake(str(path), data, mode="append", partition_by=["kind"])
    return path


def test_inspect_json_reports_the_table(table: Path) -> None:
    result = run_deltaberg("inspect", str(table), "--format", "json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    peer = PeerTable(str(table))
    assert info["version"] == peer.version() == 1
    assert info["partition_columns"] == ["kind"]
    assert info["num_files"] == len(peer.file_uris()) == 2
    assert info["num_records"] == 5
    assert info["total_bytes"] == sum(p.stat().st_size for p in table.rglob("*.parquet"))
    assert [f["name"] for f in info["schema"]["fields"]] == ["kind", "value"]
    assert info["protocol"]["min_reader_version"] == peer.protocol().min_reader_version


def test_inspect_time_travel_and_text(table: Path) -> None:
    result = deltaberg_here("inspect", str(table), "--version", "0")
    assert result.returncode == 0, result.stderr
    assert "version:          0" in result.stdout
    assert "files:            1" in result.stdout
    assert "records:          3" in result.stdout
    assert "partition by:     kind" in result.stdout


@pytest.mark.parametrize(
    "args, error",
    [
        (("inspect", "{missing}"), "NotADeltaTableError"),
        (("inspect", "{table}", "--version", "9"), "VersionNotFoundError"),
    ],
)
def test_inspect_errors_exit_2_with_one_line(table: Path, tmp_path: Path, args: tuple[str, ...], error: str) -> None:
    filled = [a.format(missing=tmp_path / "nothing-here", table=table) for a in args]
    result = deltaberg_here(*filled)
    assert result.returncode == 2
    assert error in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(filled[1]) in result.stderr


def test_convert_json_registers_then_converts_incrementally_and_expires(table: Path, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    uri = f"sqlite:///{tmp_path}/catalog.db"
    first = deltaberg_here("convert", str(table), "--identifier", "db.events", "--catalog-uri", uri, "--format", "json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["mode"] == "full" and summary["delta_version"] == 1
    assert summary["metadata_location"] == str(table / "_iceberg" / "metadata" / "v1.metadata.json")

    write_deltalake(str(table), pa.table({"kind": ["c"], "value": pa.array([6], pa.int64())}), mode="append",
                    partition_by=["kind"])
    second = deltaberg_here("convert", str(table), "--identifier", "db.events", "--catalog-uri", uri, "--format",
                            "json", "--retain-snapshots", "1")
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert (summary["mode"], summary["delta_version"], summary["snapshots_expired"]) == ("incremental", 2, 1)
    catalog = SqlCatalog("deltaberg", uri=uri, warehouse=f"file://{tmp_path}")
    iceberg = catalog.load_table("db.events")
    assert iceberg.metadata_location == summary["metadata_location"]
    assert len(iceberg.metadata.snapshots) == 1
    assert sorted(iceberg.scan().to_arrow().column("value").to_pylist()) == \
        sorted(PeerTable(str(table)).to_pyarrow_table().column("value").to_pylist())


def test_convert_format_version_3_and_its_refusals(table: Path) -> None:
    from pyiceberg.table import StaticTable

    v3 = deltaberg_here("convert", str(table), "--format-version", "3", "--format", "json")
    assert v3.returncode == 0, v3.stderr
    location = json.loads(v3.stdout)["metadata_location"]
    assert StaticTable.from_metadata(location).metadata.format_version == 3
    back = deltaberg_here("convert", str(table), "--format-version", "2", "--full", "--format", "json")
    assert back.returncode == 2 and "cannot go back to 2" in back.stderr
    unknown = deltaberg_here("convert", str(table), "--format-version", "4")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_convert_of_a_path_that_is_not_a_table_exits_2(tmp_path: Path) -> None:
    result = deltaberg_here("convert", str(tmp_path / "nothing"), "--format", "json")
    assert result.returncode == 2
    assert "NotADeltaTableError" in result.stderr and str(tmp_path / "nothing") in result.stderr


def test_convert_table_properties(table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--table-property sets a property the converter follows (the table keeps it); another is refused, exit 2 with
    one typed line, nothing written (in-process: the CLI's parsing is under test, not its start)."""
    from pyiceberg.table import StaticTable
    from support.cli import main_exit_code

    assert main_exit_code(["convert", str(table), "--format", "json", "--table-property",
                           "write.metadata.previous-versions-max=3", "--table-property",
                           "commit.manifest.min-count-to-merge=4"]) == 0
    result = json.loads(capsys.readouterr().out)
    properties = StaticTable.from_metadata(result["metadata_location"]).metadata.properties
    assert properties["write.metadata.previous-versions-max"] == "3"
    assert properties["commit.manifest.min-count-to-merge"] == "4"
    before = sorted(p.name for p in (table / "_iceberg" / "metadata").iterdir())
    write_deltalake(str(table), pa.table({"kind": ["c"], "value": pa.array([6], pa.int64())}), mode="append",
                    partition_by=["kind"])
    assert main_exit_code(["convert", str(table), "--table-property", "format-version=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("deltaberg convert: TablePropertyError: ") and "format-version" in err[0]
    assert sorted(p.name for p in (table / "_iceberg" / "metadata").iterdir()) == before
