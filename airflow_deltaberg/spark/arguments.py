"""Command-line arguments of the Spark applications."""

from __future__ import annotations

import json
from typing import Any


def json_object_argument(value: str | None, name: str) -> dict[str, Any] | None:
    """A JSON object argument, or ``@PATH`` for one kept in a file (how operators pass secrets: a command
    line is visible to every user of the machine)."""
    if not value:
        return None
    if value.startswith("@"):
        with open(value[1:], encoding="utf-8") as handle:
            value = handle.read()
    parsed = json.loads(value)
    if not isinstance(parsed, dict):
        raise SystemExit(f"{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed
