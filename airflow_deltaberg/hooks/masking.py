"""The provider's one way into Airflow's secrets masker: values registered here show as ``***`` in task logs.

What is a secret is core.redact's rule (``option_secrets``, ``is_secret_header``); this module only hands the
values to Airflow, the one part of that rule that needs Airflow (core knows nothing of it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_deltaberg.core.redact import option_secrets
from airflow_deltaberg.version_compat import mask_secret as _mask_secret


def mask_secrets(values: Iterable[Any]) -> None:
    """Register each value with Airflow's secrets masker: a string or a list whole, a mapping (a key file) by
    Airflow's own rule on its key names. Empty values are skipped; masking never raises."""
    for value in values:
        if not value or not isinstance(value, (str, list, tuple, Mapping)):
            continue
        try:
            _mask_secret(dict(value) if isinstance(value, Mapping) else value)
        except Exception:  # noqa: BLE001 - masking must never break the task or the notification
            pass


def mask_option_secrets(options: Mapping[Any, Any] | None) -> None:
    """Register the secrets of storage options or catalog properties (core.redact's ``option_secrets``)."""
    mask_secrets(option_secrets(options))
