"""The `deltaberg` command as a user runs it (a real process), and ``cli.main`` in this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: The console script of this interpreter's environment.
DELTABERG = str(Path(sys.executable).parent / "deltaberg")


def run_deltaberg(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``deltaberg <args>`` as a process; the exit code, stdout and stderr are on the result."""
    return subprocess.run([DELTABERG, *args], capture_output=True, text=True, timeout=timeout)


def main_exit_code(argv: list[str]) -> int:
    """``cli.main(argv)`` in this process: its return value, or the code of the SystemExit argparse raises on a
    usage error (capture stdout/stderr with ``capsys``)."""
    from airflow_deltaberg.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
