"""IcebergCatalogHook: pyiceberg catalog properties from an Airflow connection's extra, secrets masked."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowException, AirflowNotFoundException
from airflow.sdk.log import redact
from pyiceberg.catalog.sql import SqlCatalog

from airflow_deltaberg.core.iceberg.catalog import open_catalog
from airflow_deltaberg.hooks import IcebergCatalogHook
from airflow_deltaberg.hooks import masking as masking_module
from airflow_deltaberg.hooks.catalog import masked_properties


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "generic", **fields}))


def test_extra_properties_pass_through_and_overrides_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conn = {"type": "sql", "uri": "sqlite:////nowhere/c.db", "warehouse": "file:///wh", "init_catalog_tables": "true"}
    set_conn(monkeypatch, "cat", extra=conn)
    hook = IcebergCatalogHook("cat")
    assert hook.catalog_properties() == conn == hook.get_conn()
    uri = f"sqlite:///{tmp_path / 'c.db'}"
    props = hook.catalog_properties({"uri": uri})
    assert props == {**conn, "uri": uri}
    catalog = open_catalog("deltaberg", props)  # the properties open a working catalog
    assert isinstance(catalog, SqlCatalog)
    catalog.create_namespace("db")
    assert ("db",) in catalog.list_namespaces()
    assert (tmp_path / "c.db").is_file()


def test_no_connection_means_only_the_explicit_properties() -> None:
    assert IcebergCatalogHook(None).catalog_properties() == {}
    assert IcebergCatalogHook(None).catalog_properties({"type": "sql"}) == {"type": "sql"}


def test_empty_extra_is_no_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "cat")
    assert IcebergCatalogHook("cat").catalog_properties({"uri": "x"}) == {"uri": "x"}


def test_missing_connection() -> None:
    with pytest.raises(AirflowNotFoundException):
        IcebergCatalogHook("no_such_catalog_conn").catalog_properties()


@pytest.mark.parametrize("extra", ['{"type": "sql", "credential": "abc-secret', '["type", "sql"]'])
def test_bad_extra_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CAT", json.dumps({"conn_type": "generic", "extra": extra}))
    with pytest.raises(AirflowException, match="'cat'") as info:
        IcebergCatalogHook("cat").catalog_properties()
    assert "abc-secret" not in str(info.value)


def test_overrides_must_be_a_mapping() -> None:
    with pytest.raises(AirflowException, match="catalog_config must be a mapping"):
        IcebergCatalogHook(None).catalog_properties(["uri"])  # type: ignore[arg-type]


def test_masked_properties_hide_secrets_and_uri_passwords() -> None:
    props = {
        "type": "rest",
        "uri": "postgresql+psycopg2://user:pg-pass-1@db.example:5432/catalog",
        "credential": "client:client-secret-2",
        "s3.secret-access-key": "s3-secret-3",
        "token": "token-4",
        "warehouse": "s3://bucket/wh",
    }
    masked = masked_properties(props)
    text = repr(masked)
    for secret in ("pg-pass-1", "client-secret-2", "s3-secret-3", "token-4"):
        assert secret not in text
    assert masked["uri"] == "postgresql+psycopg2://user:***@db.example:5432/catalog"
    assert (masked["type"], masked["warehouse"]) == ("rest", "s3://bucket/wh")
    assert masked["credential"] == masked["token"] == "***"


def test_secrets_are_registered_with_the_masker(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Any] = []
    monkeypatch.setattr(masking_module, "_mask_secret", registered.append)
    set_conn(monkeypatch, "cat", extra={"type": "rest", "uri": "https://u:uri-pw@rest.example", "credential": "c"})
    IcebergCatalogHook("cat").catalog_properties({"token": "override-token", "warehouse": "wh"})
    assert sorted(registered) == ["c", "override-token", "uri-pw"]


def test_masker_redacts_registered_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    credential, password = f"cred-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    assert credential in redact(f"before {credential}")
    set_conn(monkeypatch, "cat", extra={"credential": credential, "uri": f"postgresql://u:{password}@h/db"})
    IcebergCatalogHook("cat").catalog_properties()
    assert credential not in redact(f"log line with {credential} inside")
    assert password not in redact(f"log line with {password} inside")


def test_fields_of_the_connection_form_left_empty_are_no_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_FORM", json.dumps({"conn_type": "iceberg_catalog", "extra": {
        "extra__iceberg_catalog__type": "rest", "uri": "https://catalog.example.com", "warehouse": "",
        "credential": None, "s3.region": "",
    }}))
    assert IcebergCatalogHook("form").catalog_properties() == {
        "type": "rest", "uri": "https://catalog.example.com", "s3.region": ""}
