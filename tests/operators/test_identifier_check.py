"""The operators refuse a catalog identifier that names no table when they execute, before converting."""

from __future__ import annotations

import pytest

from airflow_deltaberg.operators.convert import checked_catalog_arguments

BAD = ["db..t", ".t", "db.", "t", "db.t\nx"]


@pytest.mark.parametrize("identifier", BAD)
def test_refused_before_converting(identifier: str) -> None:
    with pytest.raises(ValueError, match="catalog identifier"):
        checked_catalog_arguments(identifier, None, "/tables/t")


def test_good_identifier_kept() -> None:
    assert checked_catalog_arguments("db.t", None, "/tables/t") == "db.t"
