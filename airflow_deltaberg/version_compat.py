"""The Airflow names whose home differs between the lowest Airflow this provider supports (3.1.0, pyproject.toml)
and the newest it is tested on (3.3): every module of the package imports them from here, nowhere else
(tests/test_version_compat.py walks the imports).

- ``AirflowFailException``, ``AirflowSensorTimeout``, ``AirflowSkipException``: ``airflow.sdk.exceptions`` in
  3.3 (which warns on the old ``airflow.exceptions`` names), ``airflow.exceptions`` in 3.1.
- ``conf``: ``airflow.sdk.conf`` in 3.3, ``airflow.configuration.conf`` in 3.1.

``mask_secret`` is ``airflow.sdk.log.mask_secret`` on every supported version (3.1.0 has it); it is taken here so
that the provider reaches Airflow's masker through this module only.

``AirflowException`` is the same class in both places on every supported version; it is exported here so that a
module takes all its exceptions from one import.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException
from airflow.sdk.log import mask_secret

try:  # Airflow 3.3 (where the names moved to after 3.1)
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )

try:  # Airflow 3.3 (where the names moved to after 3.1)
    from airflow.sdk import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef]


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "conf",
    "mask_secret",
]
