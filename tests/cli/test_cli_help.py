"""The help texts name what each command does today: every level, every option explained (issue 27 §1)."""

from __future__ import annotations

import argparse

import pytest

from airflow_deltaberg.cli import build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_validate_help_names_every_level() -> None:
    text = _flat(_subparsers()["validate"].format_help())
    for name in ("IcebergCompatV1/V2/V3", "IcebergWriterCompatV1/V3", "compat-v3", "writer-compat-v3"):
        assert name in text, name


def test_enable_help_names_every_level() -> None:
    text = _flat(_subparsers()["enable"].format_help())
    for name in ("IcebergWriterCompatV1", "IcebergCompatV2", "IcebergWriterCompatV3"):
        assert name in text, name


@pytest.mark.parametrize("command", ["inspect", "validate", "convert", "enable"])
def test_every_option_has_help(command: str) -> None:
    sub = _subparsers()[command]
    assert sub.description, f"{command} has no description in its --help"
    missing = [a.dest for a in sub._actions if not a.help]
    assert not missing, f"{command}: options without help: {missing}"


def test_convert_help_names_its_options() -> None:
    text = _flat(_subparsers()["convert"].format_help())
    for option in ("--strict", "--verify-stats", "--format-version", "--retain-snapshots", "--max-snapshot-age-hours"):
        assert option in text, option
    assert "TIMESTAMP_MILLIS" in text and "field ids" in text
