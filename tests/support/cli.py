"""The `deltaberg` command as a user runs it (a real process), and ``cli.main`` in this process."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

#: The console script of this interpreter's environment.
DELTABERG = str(Path(sys.executable).parent / "deltaberg")


def run_deltaberg(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``deltaberg <args>`` as a process; the exit code, stdout and stderr are on the result."""
    return subprocess.run([DELTABERG, *args], capture_output=True, text=True, timeout=timeout)


def deltaberg_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``deltaberg <args>`` as ``cli.main`` in this process, its result as ``run_deltaberg``'s: for tests of what a
    command does and prints, where a process (0.6-1 CPU s to start) proves nothing more; the console script's own
    process is tested in tests/cli/test_command_process.py. The root logger's handlers (pytest's) are set aside
    meanwhile, so that the command's warnings reach its stderr as in a process."""
    stdout, stderr = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers = root.handlers[:]
    for handler in handlers:
        root.removeHandler(handler)
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main_exit_code(list(args))
    finally:
        for handler in handlers:
            root.addHandler(handler)
    return subprocess.CompletedProcess(["deltaberg", *args], code, stdout.getvalue(), stderr.getvalue())


def main_exit_code(argv: list[str]) -> int:
    """``cli.main(argv)`` in this process: its return value, or the code of the SystemExit argparse raises on a
    usage error (capture stdout/stderr with ``capsys``)."""
    from airflow_deltaberg.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
