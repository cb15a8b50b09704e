"""A small tmpfs disk, to fill or make read-only (root only: elsewhere the test skips, saying so)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(folder: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` (created), unmounted at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (root only): {exc}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True, timeout=30)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; the filler file is returned, to free them again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # no space left: filled
    finally:
        os.close(fd)
    return filler


def make_read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True, timeout=30)
