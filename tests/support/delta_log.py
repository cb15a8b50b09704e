"""A Delta commit writer for building test inputs: NDJSON actions written as ``_delta_log/<version>.json``.

It is independent of the code under test on purpose (a bug in our commit writer must not shape the tables the
tests feed our reader). Paths or fsspec URIs (``memory://``, test filesystems) are accepted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
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
