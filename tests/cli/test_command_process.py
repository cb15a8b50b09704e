"""The `deltaberg` console script ends its process itself once its output is out (``cli.run``): the output is
whole, the exit code is main's, and a reader that goes away early gets no traceback."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import entry_points
from pathlib import Path

from support.cli import DELTABERG, run_deltaberg
from support.tables import write_plain_table


def test_the_console_script_is_run() -> None:
    (script,) = entry_points(group="console_scripts", name="deltaberg")
    assert script.value == "airflow_deltaberg.cli:run"


def test_output_is_whole_and_exit_codes_are_mains(tmp_path: Path) -> None:
    table = write_plain_table(tmp_path / "t")
    done = run_deltaberg("convert", str(table), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mode"] == "full"
    failed = run_deltaberg("convert", str(tmp_path / "missing"), "--format", "json")
    assert failed.returncode == 2
    assert json.loads(failed.stdout)["error"]["type"] == "NotADeltaTableError"


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    table = write_plain_table(tmp_path / "t")
    with subprocess.Popen([DELTABERG, "inspect", str(table), "--format", "json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the command writes a byte
        errors = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 2  # its output could not be delivered
    assert "Traceback" not in errors
