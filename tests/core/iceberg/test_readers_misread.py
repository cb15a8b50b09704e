"""Files and columns Iceberg readers misread (issue 26 §6): what `convert` says or refuses about them.

- Data files storing timestamps as INT64 TIMESTAMP_MILLIS: a warning in the conversion summary (every converted
  file judged under verify_stats or strict, a sample otherwise), a refusal under strict; the conversion still
  reads back as Delta's rows (pyiceberg; Iceberg Java in tests/spark/test_readers_misread_spark.py).
- Collated string columns: a warning naming the columns and their collations.
- A type widening Iceberg cannot apply is refused naming the Iceberg format version in force.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.cli import main_exit_code
from support.compat_tables import BuiltTable, add_files, create_compliant_table
from support.delta_log import append_commit, commit_file, read_actions
from support.oracle import assert_same_rows, kernel_arrow
from support.tables import iceberg_files

from airflow_deltaberg.core.errors import MisreadDataFileError, MissingDataFileError, UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert


def _widened_table(path: Path) -> None:
    """id long -> double by delta.typeChanges: the files written before hold int64, which no Iceberg version
    promotes to double."""
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    meta = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    schema = json.loads(meta["schemaString"])
    schema["fields"][0]["type"] = "double"
    schema["fields"][0]["metadata"] = {"delta.typeChanges": [{"fromType": "long", "toType": "double"}]}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                "writerFeatures": ["typeWidening"]}
    append_commit(path, [{"protocol": protocol},
                         {"metaData": {**meta, "schemaString": json.dumps(schema),
                                       "configuration": {"delta.enableTypeWidening": "true"}}}])


@pytest.mark.parametrize("format_version", [2, 3])
def test_type_widening_refusal_names_the_format_version_in_force(format_version: int, tmp_path: Path) -> None:
    path = tmp_path / "t"
    _widened_table(path)
    with pytest.raises(UnsupportedTypeError) as caught:
        convert(str(path), format_version=format_version)
    message = str(caught.value)
    assert f"Iceberg v{format_version} readers cannot apply" in message
    assert "widened from long to double" in message
    assert str(path) in message
    assert not (path / "_iceberg" / "metadata").exists() or not any((path / "_iceberg" / "metadata").iterdir())


# -- TIMESTAMP_MILLIS ------------------------------------------------------------------------------------------

FIELDS = [("id", "long"), ("time", "timestamp"), ("name", "string")]


def _values(start: int, n: int) -> dict[str, list]:
    base = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    ids = list(range(start, start + n))
    return {"id": ids, "time": [base + dt.timedelta(hours=i) for i in ids], "name": [f"n{i}" for i in ids]}


def _table(path: Path, *units: str | None) -> BuiltTable:
    """One commit of one file per unit (None: pyarrow's default, microseconds)."""
    t = create_compliant_table(path, FIELDS)
    for i, unit in enumerate(units):
        add_files(t, _values(10 * i, 3), coerce_timestamps=unit)  # type: ignore[arg-type]
    return t


def _millis_warnings(result: ConversionResult) -> list[str]:
    return [w for w in result.warnings if "TIMESTAMP_MILLIS" in w]


def _assert_delta_rows(t: BuiltTable, result: ConversionResult) -> None:
    iceberg = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    assert_same_rows(iceberg, kernel_arrow(t.path), "converted table")


@pytest.mark.parametrize("verify_stats", [False, True], ids=["sampled", "verify-stats"])
def test_a_full_conversion_warns_about_millisecond_files(verify_stats: bool, tmp_path: Path) -> None:
    t = _table(tmp_path / "t", "ms", None, "ms")
    result = convert(t.location, verify_stats=verify_stats)
    (warning,) = _millis_warnings(result)
    # Sampled: the first and the newest file (both ms); verify_stats judges all three.
    assert warning.startswith("2 of the 3 data file(s) checked" if verify_stats else "2 of the 2 data file(s) sampled")
    assert f"column(s) {t.physical('time')}" in warning
    assert str(t.path) in warning and ".parquet" in warning
    assert "row-group filter" in warning and "may skip rows" in warning
    _assert_delta_rows(t, result)


def test_microsecond_files_give_no_warning(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", None, None)
    assert _millis_warnings(convert(t.location)) == []
    assert _millis_warnings(convert(t.location, full=True, verify_stats=True)) == []


@pytest.mark.parametrize("verify_stats", [False, True], ids=["sampled", "verify-stats"])
def test_an_incremental_conversion_warns_about_the_millisecond_files_it_adds(verify_stats: bool,
                                                                             tmp_path: Path) -> None:
    t = _table(tmp_path / "t", None)
    assert _millis_warnings(convert(t.location)) == []
    add_files(t, _values(10, 3), coerce_timestamps="ms")
    result = convert(t.location, verify_stats=verify_stats)
    assert result.mode == "incremental"
    (warning,) = _millis_warnings(result)
    assert warning.startswith("1 of the 1 data file(s)")
    _assert_delta_rows(t, result)
    # Up to date: no file converted, nothing read, nothing said.
    assert _millis_warnings(convert(t.location)) == []


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
@pytest.mark.parametrize("verify_stats", [False, True], ids=["strict", "strict-verify-stats"])
def test_strict_refuses_millisecond_files_and_writes_nothing(incremental: bool, verify_stats: bool,
                                                             tmp_path: Path) -> None:
    # The millisecond file is neither the first nor the newest: only strict's reading of every footer finds it.
    t = _table(tmp_path / "t", None)
    if incremental:
        convert(t.location)
    add_files(t, _values(10, 3), coerce_timestamps="ms")
    add_files(t, _values(20, 3))
    before = iceberg_files(t.path)
    with pytest.raises(MisreadDataFileError) as caught:
        convert(t.location, strict=True, verify_stats=verify_stats)
    err = caught.value
    assert err.version == 2 and err.file is not None and err.file.endswith(".parquet")
    assert str(t.path) in str(err) and f"column(s) {t.physical('time')}" in str(err)
    assert "TIMESTAMP_MILLIS" in str(err) and not err.retryable
    assert iceberg_files(t.path) == before
    # Without strict the same run converts, with Delta's rows.
    _assert_delta_rows(t, convert(t.location))


def test_a_sampled_file_that_cannot_be_read_is_no_failure(tmp_path: Path) -> None:
    """The sample only looks for a warning: a missing data file still converts as before (the conversion reads no
    footer); strict, which must judge every file, refuses it typed."""
    t = create_compliant_table(tmp_path / "t", FIELDS)
    (add,) = add_files(t, _values(0, 3), coerce_timestamps="ms")
    add_files(t, _values(10, 3))
    (t.path / add["path"]).unlink()
    with pytest.raises(MissingDataFileError):
        convert(t.location, strict=True)
    assert _millis_warnings(convert(t.location)) == []


def test_strict_converts_microsecond_files(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", None, None)
    result = convert(t.location, strict=True)
    assert result.warnings == ()
    _assert_delta_rows(t, result)


def test_cli_strict_refuses_and_json_carries_the_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = _table(tmp_path / "t", "ms")
    assert main_exit_code(["convert", t.location, "--strict"]) == 2
    assert "MisreadDataFileError" in capsys.readouterr().err
    assert main_exit_code(["convert", t.location, "--format", "json"]) == 0
    (warning,) = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "TIMESTAMP_MILLIS" in w]
    assert warning.startswith("1 of the 1 data file(s) sampled")


def test_validate_sample_files_all_flags_every_millisecond_file(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's command: `validate --data-checks --sample-files all` exited 0 on such a table."""
    t = _table(tmp_path / "t", "ms", None, "ms")
    argv = ["validate", t.location, "--level", "compat-v2", "--data-checks", "--sample-files", "all", "--format",
            "json"]
    assert main_exit_code(argv) == 1
    report = json.loads(capsys.readouterr().out)
    flagged = [v for v in report["violations"] if v["rule_id"] == "data.timestamp-micros"]
    assert len(flagged) == 2 and all(t.physical("time") in v["message"] for v in flagged)
    assert {v["rule_id"] for v in report["violations"]} == {"data.timestamp-micros"}


# -- collations ------------------------------------------------------------------------------------------------


def test_collated_string_columns_are_named_in_a_warning(tmp_path: Path) -> None:
    """``__COLLATIONS`` as Delta on Spark writes it: on the field, a map from the field's path (``name``,
    ``tags.element``) to the collation; on a nested struct's field, its own name."""
    fields = [("id", "long"), ("name", "string"), ("tags", {"type": "array", "elementType": "string",
                                                           "containsNull": True}),
              ("info", {"type": "struct", "fields": [{"name": "city", "type": "string", "nullable": True,
                                                      "metadata": {}}]})]
    t = create_compliant_table(tmp_path / "t", fields,
                               protocol_overrides={"writerFeatures": ["columnMapping", "icebergCompatV2",
                                                                      "icebergWriterCompatV1", "collations",
                                                                      "domainMetadata"]})
    schema = t.schema()
    for f in schema["fields"]:
        if f["name"] == "name":
            f["metadata"]["__COLLATIONS"] = {"name": "spark.UTF8_LCASE"}
        if f["name"] == "tags":
            f["metadata"]["__COLLATIONS"] = {"tags.element": "icu.de_DE.75.1"}
        if f["name"] == "info":
            f["type"]["fields"][0]["metadata"]["__COLLATIONS"] = {"city": "spark.UNICODE_CI"}
    t.set_schema(schema)
    add_files(t, {"id": [1, 2], "name": ["a", "B"], "tags": [["x"], []], "info": [{"city": "Köln"}, None]})
    result = convert(t.location)
    (warning,) = [w for w in result.warnings if "collat" in w]
    assert ("name (spark.UTF8_LCASE), tags.element (icu.de_DE.75.1), info.city (spark.UNICODE_CI)" in warning)
    assert "Iceberg has no collations" in warning
    _assert_delta_rows(t, result)
    # Said on every run (the columns stay collated), also when nothing is converted.
    assert [w for w in convert(t.location).warnings if "collat" in w] == [warning]


def test_plain_strings_give_no_collation_warning(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", None)
    assert not [w for w in convert(t.location).warnings if "collat" in w]
