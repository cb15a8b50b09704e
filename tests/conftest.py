"""Shared fixtures: the real Delta tables kept in ../shared/fixtures/delta, writable copies of them, and a
throwaway Airflow home."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from submit_secrets import STORAGE_SECRET

# Airflow reads its configuration when first imported (during collection), so its environment is set at
# import time of this conftest: a throwaway home, no example DAGs, and `spark_default` on local[*] (a
# missing connection silently means YARN).
if "airflow" not in sys.modules:
    _AIRFLOW_HOME = tempfile.mkdtemp(prefix="deltaberg-airflow-home-")
    os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
    atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))

#: The fixture tables live next to the repository: <repo>/../shared/fixtures/delta (read-only there).
FIXTURES_DIR = Path(__file__).resolve().parents[1].parent / "shared/fixtures/delta"
FIXTURES_MISSING_REASON = (
    f"../shared/fixtures is absent: the Delta fixture tables are expected at {FIXTURES_DIR} "
    "(a sibling of the repository checkout); they are not part of this repository"
)


def discover_fixture_tables(root: Path = FIXTURES_DIR) -> list[str]:
    """Names (paths relative to ``root``, '/'-separated) of every directory that holds a `_delta_log`.

    Some tables are nested (``partition_cm/id``, ``stats-writing-all-types/delta``), so this walks the tree.
    """
    if not root.is_dir():
        return []
    tables = []
    for log_dir in root.rglob("_delta_log"):
        if log_dir.is_dir():
            tables.append(log_dir.parent.relative_to(root).as_posix())
    return sorted(tables)


#: Every fixture table root, computed once at collection time (empty when the fixtures are absent).
FIXTURE_TABLES: list[str] = discover_fixture_tables()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: starts Spark (a local session or spark-submit jobs); slow")
    config.addinivalue_line(
        "markers",
        "fixture_tables(exclude=()): parametrize the `fixture_table` argument with the name of every "
        "fixture table root (a directory holding _delta_log) except those in `exclude`",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize any test that takes a ``fixture_table`` argument with every fixture table name
    (minus the ``exclude`` of its ``fixture_tables`` mark)."""
    if "fixture_table" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("fixture_tables")
    exclude = set(marker.kwargs.get("exclude", ())) if marker else set()
    unknown = exclude - set(FIXTURE_TABLES)
    if FIXTURE_TABLES and unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: excluded tables do not exist: {sorted(unknown)}")
    names = [name for name in FIXTURE_TABLES if name not in exclude]
    if names:
        metafunc.parametrize("fixture_table", names)
    else:
        metafunc.parametrize(
            "fixture_table", [pytest.param(None, marks=pytest.mark.skip(reason=FIXTURES_MISSING_REASON))]
        )


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The directory of the real Delta fixture tables (skips the test when it is absent)."""
    if not FIXTURES_DIR.is_dir():
        pytest.skip(FIXTURES_MISSING_REASON)
    return FIXTURES_DIR


@pytest.fixture(scope="session")
def fixture_tables(fixtures_dir: Path) -> list[Path]:
    """The roots (directories holding `_delta_log`) of every fixture table."""
    return [fixtures_dir / name for name in FIXTURE_TABLES]


def make_writable(root: Path) -> None:
    """chmod u+w (and u+x on directories) recursively: the fixtures are read-only, copies must not be."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        for name in filenames:
            path = os.path.join(dirpath, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IRUSR)


@pytest.fixture
def copy_fixture(fixtures_dir: Path, tmp_path: Path) -> Callable[[str], Path]:
    """``copy_fixture(name)`` copies fixture table ``name`` (e.g. ``"partition_cm/id"``) into tmp_path and
    returns the writable copy's root. File modification times are preserved (copytree uses copy2)."""

    def _copy(name: str) -> Path:
        source = fixtures_dir / name
        if not (source / "_delta_log").is_dir():
            raise ValueError(f"{source} is not a fixture table (no _delta_log)")
        target = tmp_path / "copies" / name
        if target.exists():
            raise ValueError(f"{name} was already copied to {target} in this test")
        shutil.copytree(source, target)
        make_writable(target)
        return target

    return _copy


@pytest.fixture
def secret_storage_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    """A deltaberg connection whose storage options hold ``STORAGE_SECRET`` (local paths ignore them)."""
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_WITH_SECRET",
                       json.dumps({"conn_type": "deltaberg", "extra": {"token": STORAGE_SECRET}}))
    return "delta_with_secret"


@pytest.fixture
def spark_submit_commands(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The spark-submit command lines SparkSubmitHook builds during the test (the submission itself goes on),
    each with the files its ``@FILE`` arguments name: their permission bits and text, read while they exist."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    built: list[dict[str, object]] = []
    build = SparkSubmitHook._build_spark_submit_command

    def recording(self: SparkSubmitHook, application: str) -> list[str]:
        command = build(self, application)
        files = {arg[1:]: (stat.S_IMODE(os.stat(arg[1:]).st_mode), Path(arg[1:]).read_text(encoding="utf-8"))
                 for arg in command if arg.startswith("@") and os.path.isfile(arg[1:])}
        built.append({"command": command, "files": files})
        return command

    monkeypatch.setattr(SparkSubmitHook, "_build_spark_submit_command", recording)
    return built
