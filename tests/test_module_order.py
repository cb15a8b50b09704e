"""support.plugin's list of the longest modules names modules that exist (a renamed or split module would
otherwise silently lose its place at the front of the two-worker run)."""

from __future__ import annotations

from pathlib import Path

from support.plugin import LONGEST_MODULES

TESTS = Path(__file__).resolve().parent


def test_the_longest_modules_exist_once_each() -> None:
    missing = [name for name in LONGEST_MODULES if not (TESTS / name).is_file()]
    assert missing == []
    assert len(set(LONGEST_MODULES)) == len(LONGEST_MODULES)
