"""Where things are (the repository, the jars, the read-only fixture tables) and the Airflow environment.

Airflow reads its configuration when first imported (during collection), so importing this module sets it: a
throwaway AIRFLOW_HOME, no example DAGs, and ``spark_default`` on local[*] (a missing connection silently means
YARN). ``support.plugin`` imports it first.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The jars of scripts/fetch_jars.sh (``<repo>/.jars``, or ``$DELTABERG_JARS_DIR``).
JARS_DIR = (REPO_ROOT / os.environ.get("DELTABERG_JARS_DIR", ".jars")).resolve()
#: The fixture tables live next to the repository: <repo>/../shared/fixtures/delta (read-only there). Resolved:
#: readers such as deltalake name files by their real path when ../shared is a symbolic link.
FIXTURES_DIR = (REPO_ROOT.parent / "shared/fixtures/delta").resolve()
FIXTURES_MISSING_REASON = (
    f"../shared/fixtures is absent: the Delta fixture tables are expected at {FIXTURES_DIR} "
    "(a sibling of the repository checkout); they are not part of this repository"
)
#: The `airflow` command of this interpreter's environment.
AIRFLOW = str(Path(sys.executable).parent / "airflow")

if "airflow" not in sys.modules:
    _AIRFLOW_HOME = tempfile.mkdtemp(prefix="deltaberg-airflow-home-")
    os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
    atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))


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


def make_writable(root: Path) -> None:
    """chmod u+w (and u+x on directories) recursively: the fixtures are read-only, copies must not be."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
        for name in filenames:
            path = os.path.join(dirpath, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IRUSR)


def copy_fixture_table(name: str, target: Path, root: Path = FIXTURES_DIR) -> Path:
    """Copy fixture table ``name`` to ``target`` (mtimes kept: copytree uses copy2), writable; returns ``target``."""
    source = root / name
    if not (source / "_delta_log").is_dir():
        raise ValueError(f"{source} is not a fixture table (no _delta_log)")
    shutil.copytree(source, target)
    make_writable(target)
    return target


def missing_jars(patterns: tuple[str, ...]) -> list[str]:
    """The glob patterns that match no jar in JARS_DIR."""
    return [p for p in patterns if not list(JARS_DIR.glob(p))]
