"""Airflow for the hook tests: connections come from AIRFLOW_CONN_* variables, no metadata database.

Airflow reads its configuration when it is first imported, which happens while the test modules here are
collected, so AIRFLOW_HOME is pointed at a throwaway directory at import time of this conftest rather
than in a fixture; the ``airflow_home`` fixture only exposes it.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

import pytest

if "airflow" not in sys.modules:  # once imported, Airflow keeps the home it started with
    _AIRFLOW_HOME = tempfile.mkdtemp(prefix="deltaberg-airflow-home-")
    os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
    atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)

# Airflow loads the provider info of every installed provider when it starts. Until the package has its
# airflow_deltaberg.provider_info module, stand in a minimal one so that Airflow can be imported at all.
if importlib.util.find_spec("airflow_deltaberg.provider_info") is None:
    _stub = types.ModuleType("airflow_deltaberg.provider_info")
    _stub.get_provider_info = lambda: {  # type: ignore[attr-defined]
        "package-name": "airflow-deltaberg",
        "name": "Delta/Iceberg (test stand-in)",
        "description": "stand-in provider info for the hook tests",
    }
    sys.modules[_stub.__name__] = _stub


@pytest.fixture
def airflow_home() -> Path:
    return Path(os.environ["AIRFLOW_HOME"])
