"""The Spark result protocol (airflow_deltaberg.spark.protocol) without Spark: every error class of the registry
round-trips through a result document as itself, and the arguments and payloads as the applications use them."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.object_store import S3Endpoint, s3_server

from airflow_deltaberg.core import errors
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.enable.plan import EnablePlan
from airflow_deltaberg.core.errors import (
    ComplianceViolationError,
    DeltabergError,
    DeltaError,
    EnableBlockedError,
    StatsParseError,
    error_classes,
)
from airflow_deltaberg.spark.protocol import (
    EXIT_ERROR,
    EXIT_OK,
    error_document,
    error_from_document,
    json_object_argument,
    read_result,
    remove_result,
    result_payload,
    run_application,
    success_document,
    write_result,
)

PLAN = EnablePlan(table="/t", read_version=2, protocol={"minReaderVersion": 3, "readerFeatures": ["columnMapping"]},
                  metadata={"configuration": {"delta.columnMapping.mode": "id"}}, needs_rewrite=True,
                  reasons=("no-column-mapping: ids missing",), blockers=("change data feed is active",),
                  changes=("enable column mapping",), num_files=3)


def an_error(cls: type[DeltabergError], tmp_path: Path) -> DeltabergError:
    """An instance of ``cls`` built as the code that raises it builds it."""
    if cls is EnableBlockedError:
        return cls("IcebergWriterCompatV1 cannot be enabled: change data feed is active", PLAN)
    if cls is ComplianceViolationError:
        write_deltalake(str(tmp_path / "plain"), pa.table({"id": [1, 2]}))
        return cls(validate(str(tmp_path / "plain")))
    if issubclass(cls, DeltaError):
        return cls(f"a {cls.__name__}", table="s3://bucket/t", version=3, file="s3://bucket/t/_delta_log/3.json")
    if cls is StatsParseError:  # names the row of the stats array it failed on
        return cls(f"a {cls.__name__}", row=0)
    return cls(f"a {cls.__name__}")


def through_json(document: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(document))


def test_the_registry_holds_every_core_error_class_by_its_name() -> None:
    defined = {name: cls for name, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, DeltabergError) and cls.__module__ == errors.__name__}
    assert dict(error_classes()) == defined
    assert {"DeltabergError", "ConcurrentConversionError", "EnableBlockedError", "NotADeltaTableError"} <= set(defined)
    assert all(isinstance(cls.retryable, bool) for cls in defined.values())


@pytest.mark.parametrize("name", sorted(error_classes()))
def test_every_error_class_round_trips_through_the_document(name: str, tmp_path: Path) -> None:
    cls = error_classes()[name]
    error = an_error(cls, tmp_path)

    back = error_from_document(through_json(error_document(error)))

    assert type(back) is cls
    assert str(back) == str(error)
    assert back.retryable is error.retryable is cls.retryable
    if isinstance(error, DeltaError):
        assert (back.table, back.version, back.file) == (error.table, error.version, error.file)
        assert back.table is not None and back.version is not None
    if isinstance(error, EnableBlockedError):
        assert back.plan == PLAN
    if isinstance(error, ComplianceViolationError):
        assert back.report.to_dict() == error.report.to_dict()


def test_a_concurrent_conversion_comes_back_retryable() -> None:
    document = through_json(error_document(errors.ConcurrentConversionError("metadata v4 was taken")))
    assert document["error"]["retryable"] is True
    back = error_from_document(document)
    assert type(back) is errors.ConcurrentConversionError and back.retryable is True


def test_a_non_core_failure_comes_back_as_a_retryable_deltaberg_error() -> None:
    document = through_json(error_document(MemoryError("the Python worker ran out of memory")))

    back = error_from_document(document)

    assert type(back) is DeltabergError and back.retryable is True
    assert str(back) == "MemoryError: the Python worker ran out of memory"


def test_an_unknown_type_keeps_the_retryable_of_the_document() -> None:
    for retryable in (True, False):
        document = {"error": {"type": "RenamedError", "message": "m", "retryable": retryable}}
        back = error_from_document(document)
        assert type(back) is DeltabergError and back.retryable is retryable and str(back) == "RenamedError: m"


def test_result_payload_returns_the_result_or_raises_the_error() -> None:
    assert result_payload(through_json(success_document({"version": 4}))) == {"version": 4}
    error = errors.CommitConflictError("version 4 was taken", table="/t", version=4, file="/t/_delta_log/4.json")
    with pytest.raises(errors.CommitConflictError) as caught:
        result_payload(through_json(error_document(error)))
    assert str(caught.value) == str(error) and caught.value.version == 4
    with pytest.raises(DeltabergError, match="without a result"):
        result_payload({"something": 1})


def test_result_document_is_written_and_read_at_a_location(tmp_path: Path) -> None:
    location = str(tmp_path / "result.json")
    assert read_result(location) is None  # nothing written yet
    write_result(location, success_document({"a": 1}))
    assert read_result(location) == {"result": {"a": 1}}
    (tmp_path / "torn.json").write_text('{"result": ')
    assert read_result(str(tmp_path / "torn.json")) is None


def test_json_object_argument_inline_and_from_a_file(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text('{"token": "s"}')
    assert json_object_argument('{"a": 1}', "--x") == {"a": 1}
    assert json_object_argument(f"@{settings}", "--x") == {"token": "s"}
    assert json_object_argument(None, "--x") is None
    with pytest.raises(SystemExit, match="--x must be a JSON object, got list"):
        json_object_argument("[1]", "--x")


def test_run_application_reports_and_exits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    location = str(tmp_path / "result.json")
    assert run_application("app", location, lambda: {"version": 1}) == EXIT_OK
    assert read_result(location) == {"result": {"version": 1}}
    assert json.loads(capsys.readouterr().out) == {"version": 1}

    def blocked() -> dict[str, Any]:
        raise EnableBlockedError("IcebergWriterCompatV1 cannot be enabled: x", PLAN)

    assert run_application("app", location, blocked) == EXIT_ERROR
    assert read_result(location)["error"]["type"] == "EnableBlockedError"
    assert "app failed: EnableBlockedError: IcebergWriterCompatV1 cannot be enabled" in capsys.readouterr().err

    def broken() -> dict[str, Any]:
        raise KeyError("boom")

    with pytest.raises(KeyError):  # unexpected: the traceback is kept, after the document is written
        run_application("app", location, broken)
    assert read_result(location)["error"] == {"type": "KeyError", "message": "'boom'", "table": None,
                                              "version": None, "file": None, "retryable": True}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from s3_server(tmp_path_factory.mktemp("s3"))


def test_a_result_on_an_object_store_is_reached_with_the_storage_options(
        s3: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """A result location on a bucket (cluster deploy mode) is written by the application and read and removed by
    the operator with the table's storage options, not with whatever default credentials the process has."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    location = s3.uri("results/run-1.json")
    code = run_application("regenerate", location, lambda: {"mode": "full"}, s3.storage_options)
    assert code == EXIT_OK
    assert json.loads(s3.filesystem().cat_file(location)) == {"result": {"mode": "full"}}
    assert read_result(location, s3.storage_options) == {"result": {"mode": "full"}}
    remove_result(location, s3.storage_options)
    assert not s3.filesystem().exists(location)
    assert read_result(location, s3.storage_options) is None
