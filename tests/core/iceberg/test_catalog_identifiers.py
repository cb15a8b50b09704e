"""Catalog identifiers that name no table are refused before anything is written (issue 26 §5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import write_deltalake
from support.tables import iceberg_files, sample_rows

from airflow_deltaberg.core.errors import CatalogIdentifierError
from airflow_deltaberg.core.iceberg.catalog import open_catalog
from airflow_deltaberg.core.iceberg.convert import convert

BAD = ["db..t", ".t", "db.", "t", "db.t\nx", "db.\x1b[2Jt"]


@pytest.mark.parametrize("identifier", BAD)
def test_bad_identifier_leaves_no_file(tmp_path: Path, identifier: str) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), sample_rows())
    config = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    with pytest.raises(CatalogIdentifierError) as caught:
        convert(str(path), catalog_config=config, identifier=identifier)
    assert str(path) in str(caught.value) and repr(identifier) in str(caught.value)
    assert iceberg_files(path) == []
    assert not (tmp_path / "catalog.db").exists()


def test_good_identifier_registers(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), sample_rows())
    config = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    result = convert(str(path), catalog_config=config, identifier="db.t")
    assert open_catalog("deltaberg", config).load_table("db.t").metadata_location == result.metadata_location
