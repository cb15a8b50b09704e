"""Delta's retention table properties: how long the log keeps commits and VACUUM keeps removed files.

Values are Spark interval strings (``interval 30 days``, ``interval 1 week 12 hours``); Delta refuses months and
years for them, and so does this parser.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
DAY_MS = 24 * 3600 * 1000
#: Delta's defaults (protocol "Table Properties"; Delta on Spark's DeltaConfigs).
DEFAULT_LOG_RETENTION_MS = 30 * DAY_MS
DEFAULT_DELETED_FILE_RETENTION_MS = 7 * DAY_MS

_UNIT_MS = {
    "week": 7 * DAY_MS, "day": DAY_MS, "hour": 3600 * 1000, "minute": 60 * 1000, "second": 1000,
    "millisecond": 1, "microsecond": 0.001,
}
_PAIR = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")


def interval_ms(text: str) -> int:
    """Milliseconds of a Spark interval string; ValueError for one Delta would not take."""
    body = text.strip().lower()
    body = body[len("interval"):] if body.startswith("interval") else body
    total = 0.0
    end = 0
    for match in _PAIR.finditer(body):
        if body[end:match.start()].strip():
            raise ValueError(f"not an interval: {text!r}")
        unit = match.group(2).removesuffix("s")
        if unit not in _UNIT_MS:
            raise ValueError(f"unsupported interval unit {match.group(2)!r} in {text!r}")
        total += float(match.group(1)) * _UNIT_MS[unit]
        end = match.end()
    if end == 0 or body[end:].strip() or total < 0:
        raise ValueError(f"not an interval: {text!r}")
    return int(total)


def retention_ms(configuration: Mapping[str, str], key: str, default_ms: int) -> int:
    """The retention ``key`` of a table's configuration in ms, ``default_ms`` when unset. ValueError when set to
    something that is not an interval."""
    value = configuration.get(key)
    return default_ms if value is None else interval_ms(value)
