"""A conversion killed with SIGKILL at a chosen point, as a separate process (``killed_conversion``): what the next
run finds after a kill between writing files and publishing them.

The child numbers every storage write, replace and delete of the run (``LocalStorage``) and writes one line per
call to a log (``<n> <call> <key>``) before making it; it kills itself just before call ``kill_at`` (0: never), or
before writing the manifest list of its second snapshot when ``kill_at`` is ``"manifest-list"``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg.core.iceberg import convert_commit
from airflow_deltaberg.core.iceberg.attempt_cleanup import attempt_of
from support.environment import REPO_ROOT


def killed_conversion(path: Path, kill_at: int | str, log: Path, **kwargs: Any) -> int:
    """Run ``convert(path, **kwargs)`` in a child killed at ``kill_at``; its exit code (-9 when killed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")])}
    child = subprocess.run([sys.executable, "-m", "support.killed_run", str(path), str(kill_at), str(log),
                            json.dumps(kwargs)], env=env, capture_output=True, text=True, timeout=300)
    if child.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"the conversion failed ({child.returncode}):\n{child.stderr[-3000:]}")
    return child.returncode


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

    def counting(name: str) -> None:
        original = getattr(storage.LocalStorage, name)

        def call(self: storage.LocalStorage, key: str, *args: Any) -> Any:
            nonlocal count
            count += 1
            log.write(f"{count} {name} {key}\n")
            log.flush()
            if str(count) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, key, *args)

        setattr(storage.LocalStorage, name, call)

    for name in ("write_if_absent", "replace", "delete"):
        counting(name)
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


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))


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
