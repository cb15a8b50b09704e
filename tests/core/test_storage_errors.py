"""Storage failures are typed StorageErrors naming the file, without secrets, and never bare client exceptions."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg.core.errors import StorageConfigError, StorageError
from airflow_deltaberg.core.redact import Redactor
from airflow_deltaberg.core.storage import FsspecStorage, LocalStorage, open_storage

SECRET = "s3cr3t-value-0123456789"


@pytest.mark.parametrize("blocker", ["folder", "folder/inner"])
def test_writing_below_a_file_is_a_configuration_error(tmp_path: Path, blocker: str) -> None:
    storage = open_storage(str(tmp_path / "t"))
    (tmp_path / "t" / blocker).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "t" / blocker).write_text("a file")
    for write in (storage.write_if_absent, storage.replace):
        with pytest.raises(StorageConfigError, match="folder/inner/x.json"):
            write("folder/inner/x.json", b"{}")
    with pytest.raises(StorageConfigError, match=f"{tmp_path / 't' / blocker} is not a folder"):
        storage.check_folder("folder/inner/deeper")
    assert (tmp_path / "t" / blocker).read_text() == "a file"


def test_check_folder_passes_where_folders_are_or_nothing_is(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "t"))
    storage.check_folder("_iceberg/metadata")
    (tmp_path / "t" / "_iceberg" / "metadata").mkdir(parents=True)
    storage.check_folder("_iceberg/metadata")
    open_storage("memory://check-folder/t").check_folder("_iceberg/metadata")  # object stores: nothing to check


def test_a_symlink_loop_as_the_root(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(StorageError, match="symbolic links") as info:
        LocalStorage(str(loop))
    assert str(loop) in str(info.value)


@pytest.mark.parametrize(
    "location",
    ["s3://KEY:SECRET@bucket/t", "gs://user:SECRET@bucket/t", "s3://KEY@bucket/t",
     "abfss://container:SECRET@account.dfs.core.windows.net/t", "memory://user:SECRET@x/t"],
)
def test_credentials_in_the_location_are_refused_unshown(location: str) -> None:
    with pytest.raises(StorageConfigError, match="credentials in the location URL") as info:
        open_storage(location)
    assert "SECRET" not in str(info.value) and "KEY" not in str(info.value)


def test_an_azure_container_is_no_credential() -> None:
    """`container@account` is Azure's way to name a container, not credentials: the location is opened (lazily:
    nothing is requested yet)."""
    location = "abfss://container@account.dfs.core.windows.net/t"
    storage = open_storage(location, {"account_key": SECRET})
    assert storage.root == location and SECRET not in repr(storage)


class FailingFs:
    """An fsspec-like filesystem whose every call fails with ``error``."""

    protocol = ("fake",)

    def __init__(self, error: BaseException):
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def fail(*args: object, **kwargs: object) -> None:
            raise self.error

        return fail


@pytest.mark.parametrize(
    ("error", "typed", "text"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, f"refused, token={SECRET}"), StorageError,
         "cannot reach the storage endpoint http://127.0.0.1:1"),
        (PermissionError(errno.EACCES, f"denied for {SECRET}"), StorageError, "permission denied to read"),
        (OSError(errno.EIO, f"I/O error near {SECRET}"), StorageError, "cannot read"),
        (TypeError(f"Session.__init__() got an unexpected keyword argument 'bogus' ({SECRET})"), StorageConfigError,
         "unknown storage option 'bogus'"),
    ],
)
def test_client_failures_become_typed_errors_without_secrets(error: BaseException, typed: type, text: str) -> None:
    storage = FsspecStorage("fake://bucket/t", FailingFs(error), "bucket/t", endpoint="http://127.0.0.1:1",
                            redactor=Redactor([SECRET]))
    with pytest.raises(typed) as info:
        storage.read("_delta_log/_last_checkpoint")
    assert text in str(info.value) and "fake://bucket/t" in str(info.value)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None  # the client's exception holds the secret: not chained


def test_programming_errors_are_not_disguised() -> None:
    storage = FsspecStorage("fake://bucket/t", FailingFs(TypeError("unsupported operand")), "bucket/t")
    with pytest.raises(TypeError, match="unsupported operand"):
        storage.read("x")
