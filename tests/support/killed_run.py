"""A conversion killed with SIGKILL at a chosen point, as a separate process (``killed_conversion``): what the next
run finds after a kill between writing files and publishing them.

The processes are forked from one multiprocessing fork server per test process, which imported the converter once:
a fresh ``python -m support.killed_run`` paid ~2 CPU s of imports per kill point.

The child numbers every storage write, replace and delete of the run (``LocalStorage``) and writes one line per
call to a log (``<n> <call> <key>``) before making it; it kills itself just before call ``kill_at`` (0: never), or
before writing the manifest list of its second snapshot when ``kill_at`` is ``"manifest-list"``.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg.core.iceberg import convert_commit
from airflow_deltaberg.core.iceberg.attempt_cleanup import attempt_of
from support.environment import REPO_ROOT

#: Imported by the fork server before it forks a child.
PRELOAD = ["support.killed_run", "airflow_deltaberg.core.iceberg.convert"]


def _fork_server() -> multiprocessing.context.BaseContext:
    """The fork-server context; the server starts on first use with the package and tests on its path (Python 3.11's
    server does not take the parent's sys.path)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    path = os.pathsep.join(p for p in (str(REPO_ROOT), str(REPO_ROOT / "tests"), os.environ.get("PYTHONPATH")) if p)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return context


def killed_conversion(path: Path, kill_at: int | str, log: Path, **kwargs: Any) -> int:
    """Run ``convert(path, **kwargs)`` in a child killed at ``kill_at``; its exit code (-9 when killed; a child
    that fails writes its traceback to stderr)."""
    child = _fork_server().Process(target=_main, args=(str(path), str(kill_at), str(log), kwargs))
    child.start()
    child.join(300)
    if child.exitcode is None:
        child.kill()
        child.join()
        raise AssertionError("the conversion ran over 300 s")
    if child.exitcode not in (0, -signal.SIGKILL):
        raise AssertionError(f"the conversion failed (exit {child.exitcode}; its traceback is on stderr)")
    return child.exitcode


def calls(log: Path) -> list[tuple[int, str, str]]:
    """The storage calls a child logged: (number, call, key)."""
    out = []
    for line in log.read_text().splitlines():
        number, call, key = line.split(" ", 2)
        out.append((int(number), call, key))
    return out


def _main(path: str, kill_at: str, log_path: str, kwargs: dict[str, Any]) -> None:
    from airflow_deltaberg.core import storage
    from airflow_deltaberg.core.iceberg import convert_commit
    from airflow_deltaberg.core.iceberg.convert import convert

    count = 0
    log = open(log_path, "a")  # noqa: SIM115 - open for the life of the process

    def counted(name: str, key: str) -> None:
        nonlocal count
        count += 1
        log.write(f"{count} {name} {key}\n")
        log.flush()
        if str(count) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def counting(name: str) -> None:
        original = getattr(storage.LocalStorage, name)

        def call(self: storage.LocalStorage, key: str, *args: Any) -> Any:
            counted(name, key)
            return original(self, key, *args)

        setattr(storage.LocalStorage, name, call)

    for name in ("write_if_absent", "replace"):
        counting(name)
    # LocalStorage.delete (one file) goes through delete_many, which unlinks a batch in one bounded call: one counted
    # delete per file instead, so that a kill can land between any two of expiry's deletes, as it can in a real run.
    delete_many = storage.LocalStorage.delete_many

    def counted_deletes(self: storage.LocalStorage, keys: Any) -> None:
        for key in keys:
            counted("delete", key)
            delete_many(self, [key])

    storage.LocalStorage.delete_many = counted_deletes  # type: ignore[method-assign]
    if kill_at == "manifest-list":
        lists = 0
        write_list = convert_commit.write_manifest_list_rows

        def killed_list(*args: Any, **kw: Any) -> Any:
            nonlocal lists
            lists += 1
            if lists == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return write_list(*args, **kw)

        convert_commit.write_manifest_list_rows = killed_list
    convert(path, **kwargs)


def killed_attempt(path: Path, monkeypatch: pytest.MonkeyPatch, conversion: Callable[[], object]) -> set[Path]:
    """Run ``conversion`` of the table at ``path`` so that it dies before its metadata file, in this process,
    leaving its files as a killed (or still running) process does (the cleanup of a failed attempt finds nothing to
    delete); returns them: all of one attempt."""
    metadata = path / "_iceberg" / "metadata"
    before = set(metadata.iterdir())

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr(convert_commit, "publish_metadata", killed)
        patch.setattr(convert_commit, "attempt_keys", lambda storage, attempt: [])
        with pytest.raises(KeyboardInterrupt):
            conversion()
    left = set(metadata.iterdir()) - before
    assert left and all(attempt_of(p.name) for p in left)
    assert len({attempt_of(p.name) for p in left}) == 1
    return left
