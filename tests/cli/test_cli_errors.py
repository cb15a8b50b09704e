"""`deltaberg` in-process (cli.main): storage and argument errors exit 2 with one typed line and no traceback,
write nothing, and never show a secret (storage option values, URL credentials) on stdout, stderr or in any log
record, DEBUG logging of botocore, urllib3, gcsfs and s3fs included."""

from __future__ import annotations

import builtins
import errno
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.cli import main_exit_code

from airflow_deltaberg.cli import main

SECRET = "s3cr3t/SHOULD+never=show-0123456789"
KEY_ID = "AKIAFAKEKEYID0123456"
CHATTY_LOGGERS = ("", "botocore", "aiobotocore", "s3fs", "urllib3", "gcsfs", "google", "google.auth", "aiohttp",
                  "fsspec", "requests", "airflow_deltaberg")


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in CHATTY_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere: environment, ~/.aws files, instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    write_deltalake(str(path), pa.table({"value": pa.array([1, 2, 3], pa.int64())}))
    return path


def run_failing(argv: list[str], capsys: pytest.CaptureFixture[str], error: str) -> str:
    """Run a command that must fail with ``error``: exit 2, one line on stderr naming the error, no traceback."""
    code = main_exit_code(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert error in err, err
    assert "Traceback" not in err and "Traceback" not in out
    assert len(err.strip().splitlines()) == 1, err
    return out + err


def assert_nowhere(text: str, caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    logged = caplog.text + "\n".join(r.getMessage() + str(r.exc_text or "") for r in caplog.records)
    for secret in secrets:
        assert secret not in text, text
        assert secret not in logged, [line for line in logged.splitlines() if secret in line][:3]


def iceberg_state(root: Path) -> dict[str, bytes] | bytes | None:
    target = root / "_iceberg"
    if target.is_file():
        return target.read_bytes()
    if not target.exists():
        return None
    return {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()}


# -- secrets ------------------------------------------------------------------------------------------------


def test_s3_closed_endpoint_fails_fast_names_the_endpoint_and_hides_the_keys(
        closed_port: int, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture,
        no_aws_credentials: None) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    started = time.monotonic()
    text = run_failing(["inspect", "s3://bucket/t", "--storage-option", f"endpoint_url={endpoint}",
                        "--storage-option", f"key={KEY_ID}", "--storage-option", f"secret={SECRET}"],
                       capsys, "StorageError")
    assert time.monotonic() - started < 8, "a refused connection must not be retried for long (it took 9-14 s)"
    assert f"cannot reach the storage endpoint {endpoint}" in text and "s3://bucket/t" in text
    assert_nowhere(text, debug_logs, SECRET, KEY_ID)


def test_s3_location_with_credentials_is_refused_and_never_echoed(
        closed_port: int, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture) -> None:
    text = run_failing(["inspect", f"s3://{KEY_ID}:{SECRET}@bucket/t", "--storage-option",
                        f"endpoint_url=http://127.0.0.1:{closed_port}"], capsys, "StorageConfigError")
    assert "s3://***@bucket/t" in text and "storage options" in text
    assert_nowhere(text, debug_logs, SECRET, KEY_ID)


def test_gs_token_with_an_endpoint_goes_to_that_endpoint_only(
        closed_port: int, capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    def no_public_calls(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a request outside the endpoint: {args} {kwargs}")

    monkeypatch.setattr(requests, "get", no_public_calls)
    monkeypatch.setattr(requests.Session, "request", no_public_calls)
    endpoint = f"http://127.0.0.1:{closed_port}"
    started = time.monotonic()
    text = run_failing(["inspect", "gs://bucket/t", "--storage-option", f"token={SECRET}",
                        "--storage-option", f"endpoint_url={endpoint}"], capsys, "StorageError")
    assert time.monotonic() - started < 15
    assert f"cannot reach the storage endpoint {endpoint}" in text and "gs://bucket/t" in text
    assert "oauth2.googleapis.com" not in text + debug_logs.text
    assert_nowhere(text, debug_logs, SECRET)


def test_gs_raw_token_checked_at_google_is_never_echoed(
        capsys: pytest.CaptureFixture[str], debug_logs: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an endpoint, gcsfs checks a raw token at Google's tokeninfo URL, the token in its query: a failed
    request names that URL (here the request fails as it does without network)."""
    import gcsfs.credentials
    import requests

    def unreachable(url: str, params: dict[str, str], **kwargs: object) -> None:
        logging.getLogger("urllib3.connectionpool").debug("GET %s?access_token=%s", url, params["access_token"])
        raise requests.exceptions.ConnectionError(
            f"HTTPSConnectionPool(host='oauth2.googleapis.com', port=443): Max retries exceeded with url: "
            f"/tokeninfo?access_token={requests.utils.quote(params['access_token'], safe='')}")

    monkeypatch.setattr(gcsfs.credentials.requests, "get", unreachable)
    text = run_failing(["inspect", "gs://bucket/t", "--storage-option", f"token={SECRET}"], capsys, "Storage")
    assert "gs://bucket/t" in text
    assert_nowhere(text, debug_logs, SECRET, requests.utils.quote(SECRET, safe=""))


def test_abfs_account_key_is_never_echoed(closed_port: int, capsys: pytest.CaptureFixture[str],
                                          debug_logs: pytest.LogCaptureFixture) -> None:
    location = "abfss://container@account.dfs.core.windows.net/t"
    connection_string = (f"DefaultEndpointsProtocol=http;AccountName=account;AccountKey={SECRET};"
                         f"BlobEndpoint=http://127.0.0.1:{closed_port}/account;")
    args = ["inspect", location, "--storage-option", f"account_key={SECRET}",
            "--storage-option", f"connection_string={connection_string}"]
    started = time.monotonic()
    text = run_failing(args, capsys, "StorageError")
    assert time.monotonic() - started < 20, "azure-core's retries (~80 s) must not be waited for"
    assert location in text and f"127.0.0.1:{closed_port}" in text, text
    assert_nowhere(text, debug_logs, SECRET)


def test_abfs_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import fsspec

    def no_adlfs(scheme: str) -> type:
        raise ImportError("Install adlfs to access Azure Datalake Gen2 and Azure Blob Storage")

    monkeypatch.setattr(fsspec, "get_filesystem_class", no_adlfs)
    text = run_failing(["inspect", "abfss://container@account.dfs.core.windows.net/t"], capsys, "StorageConfigError")
    assert "airflow-deltaberg[abfs]" in text


def test_unexpected_errors_are_redacted_and_exit_2(
        table: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        debug_logs: pytest.LogCaptureFixture) -> None:
    import airflow_deltaberg.cli as cli

    def broken(*args: object, **kwargs: object) -> None:
        logging.getLogger("somewhere").warning("while using token %s", SECRET)
        raise RuntimeError(f"boom with {SECRET} inside, from s3://{KEY_ID}:{SECRET}@bucket/x")

    monkeypatch.setattr(cli, "DeltaTable", broken)
    text = run_failing(["inspect", str(table), "--storage-option", f"token={SECRET}"], capsys,
                       "unexpected RuntimeError")
    assert "boom with ***" in text and str(table) in text
    assert_nowhere(text, debug_logs, SECRET, KEY_ID)


def test_json_output_and_warnings_are_redacted(table: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Warnings printed without any logging configured (Python's last-resort handler) are redacted too."""
    import airflow_deltaberg.cli as cli

    describe = cli.describe

    def leaky(snapshot: object) -> dict[str, object]:
        logging.getLogger("airflow_deltaberg.somewhere").warning("token is %s", SECRET)
        return {**describe(snapshot), "echo": SECRET}

    monkeypatch.setattr(cli, "describe", leaky)
    root = logging.getLogger()
    handlers, root.handlers = root.handlers, []
    try:
        assert main(["inspect", str(table), "--format", "json", "--storage-option", f"sas_token={SECRET}"]) == 0
    finally:
        root.handlers = handlers
    out, err = capsys.readouterr()
    assert '"echo": "***"' in out and "token is ***" in err
    assert SECRET not in out + err


# -- storage errors are typed -----------------------------------------------------------------------------------


def test_s3_without_credentials_is_a_configuration_error(
        closed_port: int, capsys: pytest.CaptureFixture[str], no_aws_credentials: None) -> None:
    text = run_failing(["inspect", "s3://bucket/t", "--storage-option",
                        f"endpoint_url=http://127.0.0.1:{closed_port}"], capsys, "StorageConfigError")
    assert "no credentials" in text and "s3://bucket/t" in text


def test_unknown_s3_option_is_named_without_its_value(closed_port: int, capsys: pytest.CaptureFixture[str],
                                                       no_aws_credentials: None) -> None:
    text = run_failing(["inspect", "s3://bucket/t", "--storage-option", f"endpoint_url=http://127.0.0.1:{closed_port}",
                        "--storage-option", f"bogus_option={SECRET}"], capsys, "StorageConfigError")
    assert "bogus_option" in text and "s3://bucket/t" in text
    assert SECRET not in text


def test_symlink_loop_as_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for command in ("inspect", "validate", "convert"):
        text = run_failing([command, str(loop)], capsys, "StorageError:")
        assert str(loop) in text and "symbolic links" in text


@pytest.mark.parametrize("blocker", ["_iceberg", "_iceberg/metadata"])
def test_iceberg_folder_that_is_a_file(table: Path, capsys: pytest.CaptureFixture[str], blocker: str) -> None:
    (table / blocker).parent.mkdir(exist_ok=True)
    (table / blocker).write_bytes(b"not a folder")
    before = iceberg_state(table)
    text = run_failing(["convert", str(table)], capsys, "StorageConfigError")
    assert str(table / blocker) in text and "not a folder" in text
    assert iceberg_state(table) == before


def test_a_table_path_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    for command in ("inspect", "validate", "convert"):
        run_failing([command, str(path)], capsys, "NotADeltaTableError")
    assert path.read_text() == "x"


@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """``unreadable(folder)``: opening any file below folder fails with EACCES (the tests run as root, for whom
    chmod does not make a file unreadable)."""
    real_open = builtins.open
    real_scandir = os.scandir
    folders: list[str] = []

    def denied(path: object) -> bool:
        return any(str(path).startswith(folder) for folder in folders)

    def fake_open(file: object, *args: object, **kwargs: object) -> object:
        if denied(file):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    def fake_scandir(path: object = ".") -> Iterator[os.DirEntry[str]]:
        if denied(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "scandir", fake_scandir)
    return lambda folder: folders.append(str(folder))


def test_permission_denied_on_a_local_table(table: Path, capsys: pytest.CaptureFixture[str],
                                            unreadable: Callable[[Path], None]) -> None:
    unreadable(table / "_delta_log" / "_last_checkpoint")
    (table / "_delta_log" / "_last_checkpoint").write_text("{}")  # written before open is denied below
    text = run_failing(["inspect", str(table)], capsys, "StorageError:")
    assert "Permission denied" in text and str(table) in text


# -- argument errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["convert", "{table}", "--catalog-property", "noequals"],
        ["convert", "{table}", "--catalog-property", "=value"],
        ["inspect", "{table}", "--storage-option", "noequals"],
        ["convert", "{table}", "--max-snapshot-age-hours", "nan"],
        ["convert", "{table}", "--max-snapshot-age-hours", "inf"],
        ["convert", "{table}", "--max-snapshot-age-hours", "-1"],
        ["convert", "{table}", "--retain-snapshots", "-1"],
        ["convert", "{table}", "--retain-snapshots", "0"],
    ],
    ids=["catalog-property", "catalog-property-empty-key", "storage-option", "age-nan", "age-inf", "age-negative",
         "retain-negative", "retain-zero"],
)
def test_bad_arguments_are_usage_errors(table: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    argv = [a.format(table=table) for a in args]
    code = main_exit_code(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "usage: deltaberg" in err and args[2] in err and "Traceback" not in err
    assert not (table / "_iceberg").exists()


def test_a_storage_option_without_equals_is_not_echoed(table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_exit_code(["inspect", str(table), "--storage-option", SECRET.replace("=", "")]) == 2
    assert SECRET.replace("=", "") not in capsys.readouterr().err


# -- messages -----------------------------------------------------------------------------------------------


def test_a_message_with_line_breaks_is_printed_on_one_line(table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text from the log (a feature name) or from pyarrow may hold line breaks; scripts read one stderr line."""
    version = len(list((table / "_delta_log").glob("*.json")))
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["bad\nfeature"],
                "writerFeatures": ["bad\nfeature"]}
    (table / "_delta_log" / f"{version:020d}.json").write_text(json.dumps({"protocol": protocol}) + "\n")
    for command in ("inspect", "validate", "convert"):
        text = run_failing([command, str(table)], capsys, "UnsupportedFeatureError")
        assert "bad" in text and "feature" in text, text
    assert not (table / "_iceberg").exists()


def test_warnings_are_lines_of_their_own(table: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning on the way (a malformed _last_checkpoint is ignored) is a `deltaberg <command>: warning:` line;
    the command still succeeds."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a shell: pytest's capture is not there
    (table / "_delta_log" / "_last_checkpoint").write_text("[garbage")
    assert main_exit_code(["inspect", str(table)]) == 0
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("deltaberg inspect: warning: ") for line in lines), err
    assert "_last_checkpoint" in err


# -- --format json: the error is JSON too -------------------------------------------------------------------


def run_failing_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str]:
    """Run a command with ``--format json`` that must fail: exit 2, stdout is the error document and nothing else,
    stderr the error line (the usage text for a usage error)."""
    code = main_exit_code([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    document = json.loads(out)
    assert list(document) == ["error"], document
    assert document["error"]["message"] in err.strip().splitlines()[-1]
    assert "Traceback" not in out + err
    return document["error"], out + err


@pytest.mark.parametrize("command", ["inspect", "validate", "convert", "enable"])
def test_json_errors_of_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    from airflow_deltaberg.spark.protocol import error_document

    missing = tmp_path / "none"
    fields, _ = run_failing_json([command, str(missing)], capsys)
    assert list(fields) == list(error_document(RuntimeError())["error"])  # the Spark result protocol's fields
    assert fields["type"] == "NotADeltaTableError" and fields["retryable"] is False
    assert fields["table"] == str(missing) and str(missing) in str(fields["message"])
    assert not missing.exists()


def test_json_errors_name_the_version_and_file(table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (table / "_delta_log" / "00000000000000000001.json").write_text("{not json\n")
    fields, _ = run_failing_json(["inspect", str(table)], capsys)
    assert fields["type"] == "CorruptLogError"
    assert (fields["table"], fields["version"]) == (str(table), 1)
    assert str(fields["file"]).endswith("00000000000000000001.json")


def test_json_errors_hold_no_secret(closed_port: int, capsys: pytest.CaptureFixture[str],
                                   debug_logs: pytest.LogCaptureFixture, no_aws_credentials: None) -> None:
    fields, text = run_failing_json(
        ["inspect", f"s3://{KEY_ID}:{SECRET}@bucket/t", "--storage-option",
         f"endpoint_url=http://127.0.0.1:{closed_port}", "--storage-option", f"secret={SECRET}"], capsys)
    assert fields["type"] == "StorageConfigError" and "s3://***@bucket/t" in str(fields["message"])
    assert_nowhere(text, debug_logs, SECRET, KEY_ID)


def test_unexpected_json_errors_are_redacted(table: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_deltaberg.cli as cli

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"boom with {SECRET} inside")

    monkeypatch.setattr(cli, "DeltaTable", broken)
    fields, text = run_failing_json(["inspect", str(table), "--storage-option", f"token={SECRET}"], capsys)
    assert fields == {"type": "RuntimeError", "message": "boom with *** inside", "table": str(table),
                      "version": None, "file": None, "retryable": True}
    assert SECRET not in text


def test_json_usage_errors(table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fields, text = run_failing_json(["convert", str(table), "--retain-snapshots", "0"], capsys)
    assert fields["type"] == "UsageError" and fields["retryable"] is False
    assert "--retain-snapshots" in str(fields["message"]) and "usage: deltaberg" in text
    assert not (table / "_iceberg").exists()


@pytest.mark.parametrize("output", ["text", "markdown"])
def test_other_formats_keep_the_error_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     output: str) -> None:
    assert main_exit_code(["validate", str(tmp_path / "none"), "--format", output]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("deltaberg validate: NotADeltaTableError:") and len(err.splitlines()) == 1
