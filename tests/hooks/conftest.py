"""Airflow for the hook tests: connections come from AIRFLOW_CONN_* variables, no metadata database.

AIRFLOW_HOME is set by tests/conftest.py before Airflow is first imported; ``airflow_home`` exposes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def airflow_home() -> Path:
    return Path(os.environ["AIRFLOW_HOME"])
