"""A Delta commit writer for building test inputs: NDJSON actions written as ``_delta_log/<version>.json``.

It is independent of the code under test on purpose (a bug in our commit writer must not shape the tables the
tests feed our reader). Paths or fsspec URIs (``memory://``, test filesystems) are accepted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import fsspec

#: The engineInfo of the commits written here.
ENGINE_INFO = "deltaberg-tests"


def encode_actions(actions: Sequence[Mapping[str, Any]]) -> bytes:
    """NDJSON, one action per line, as the protocol requires."""
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


def commit_path(location: str | Path, version: int) -> str:
    return f"{str(location).rstrip('/')}/_delta_log/{version:020d}.json"


def write_commit(location: str | Path, actions: Sequence[Mapping[str, Any]], *, read_version: int | None,
                 operation: str = "WRITE") -> int:
    """Commit ``actions`` (after a commitInfo) as version ``read_version + 1`` (0 when None); returns it.

    Refuses to overwrite an existing version (FileExistsError)."""
    version = 0 if read_version is None else read_version + 1
    info: dict[str, Any] = {"timestamp": int(time.time() * 1000), "operation": operation,
                            "operationParameters": {}, "engineInfo": ENGINE_INFO}
    if read_version is not None:
        info["readVersion"] = read_version
    payload = encode_actions([{"commitInfo": info}, *actions])
    if isinstance(location, Path) or "://" not in str(location):
        path = Path(commit_path(location, version))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as out:
            out.write(payload)
        return version
    fs, path = fsspec.core.url_to_fs(commit_path(location, version))
    if fs.exists(path):
        raise FileExistsError(path)
    fs.pipe_file(path, payload)
    return version


def latest_version(location: str | Path) -> int:
    """The highest commit version in a local table's _delta_log."""
    log = Path(location) / "_delta_log"
    return max(int(p.name.split(".")[0]) for p in log.glob("*.json") if p.name.split(".")[0].isdigit())


# -- hand-written commits: the raw NDJSON, as a test edits it ------------------------------------------------


def commit_file(root: Path, version: int) -> Path:
    """The JSON commit file of ``version`` in a local table."""
    return Path(root) / "_delta_log" / f"{version:020d}.json"


def read_actions(path: Path) -> list[dict[str, Any]]:
    """The actions of a JSON commit file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_actions(path: Path, actions: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``actions`` as ``path``, one JSON line each, nothing added (replaces the file)."""
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return path


def edit_commit(root: Path, version: int, change: Callable[[list[dict[str, Any]]], None]) -> Path:
    """Apply ``change`` to the actions of commit ``version`` (in place) and write them back."""
    path = commit_file(root, version)
    actions = read_actions(path)
    change(actions)
    return write_actions(path, actions)


def append_commit(root: Path, actions: Sequence[Mapping[str, Any]], version: int | None = None,
                  operation: str | None = "WRITE") -> int:
    """Write ``actions`` as commit ``version`` (by default the one after the newest on disk), after a commitInfo
    with a fixed timestamp (1_800_000_000_000 + version) unless ``operation`` is None; returns the version."""
    version = latest_version(root) + 1 if version is None else version
    info = [] if operation is None else [{"commitInfo": {"timestamp": 1_800_000_000_000 + version,
                                                         "operation": operation}}]
    write_actions(commit_file(root, version), [*info, *actions])
    return version
