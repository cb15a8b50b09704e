"""Settings handed to a Spark application by the operators that submit one."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk.log import mask_secret


def settings_argument(work: str, flag: str, value: Mapping[str, Any], *, local_files: bool) -> str:
    """The argument that carries ``value`` (storage options, catalog properties) to the application.

    With ``local_files`` (the driver runs on this machine) it is ``@FILE``, written to a file in ``work`` that
    only this user can read: the command line would show the secrets to every user of the machine. Otherwise
    the JSON itself, its values masked in the logs (the hook logs the command line).
    """
    if not local_files:
        for item in value.values():
            if isinstance(item, str):
                mask_secret(item)
        return json.dumps(dict(value))
    path = os.path.join(work, flag.strip("-") + ".json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(value), handle)
    return f"@{path}"
