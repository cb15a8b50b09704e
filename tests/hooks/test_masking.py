"""The one way into Airflow's secrets masker (hooks/masking.py): every former caller still registers its secrets
through it, and the masker then hides them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.execution_time.secrets_masker import redact

from airflow_deltaberg.hooks import DeltaStorageHook
from airflow_deltaberg.hooks import masking as masking_module
from airflow_deltaberg.hooks.catalog import IcebergCatalogHook
from airflow_deltaberg.hooks.masking import mask_option_secrets, mask_secrets
from airflow_deltaberg.operators.spark_submit import SparkApplicationRun, SparkTarget


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    values: list[Any] = []
    monkeypatch.setattr(masking_module, "_mask_secret", values.append)
    return values


def test_mask_secrets_registers_strings_lists_and_mappings_and_skips_the_rest(registered: list[Any]) -> None:
    mask_secrets(["s3cret-value", "", None, 42, ["a-list-secret"], {"private_key": "pk"}])
    assert registered == ["s3cret-value", ["a-list-secret"], {"private_key": "pk"}]


def test_mask_secrets_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: Any) -> None:
        raise RuntimeError("masker down")

    monkeypatch.setattr(masking_module, "_mask_secret", broken)
    mask_secrets(["s3cret-value"])  # the task goes on


def test_option_secrets_reach_the_real_masker() -> None:
    token, password = f"token-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    mask_option_secrets({"token": token, "uri": f"postgresql://u:{password}@db/catalog", "region": "eu-west-1"})
    assert redact(f"line {token} and {password}") == "line *** and ***"
    assert "eu-west-1" in redact("region eu-west-1")


def test_storage_hook_registers_its_secrets(registered: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_MASKED_STORE", json.dumps(
        {"conn_type": "deltaberg", "extra": {"token": "storage-token-1", "endpoint_url": "http://u:url-pw-2@minio"}}))
    DeltaStorageHook("masked_store").storage_options()
    assert registered == ["storage-token-1", "url-pw-2"]


def test_catalog_hook_registers_its_secrets(registered: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_MASKED_CATALOG", json.dumps(
        {"conn_type": "generic", "extra": {"type": "rest", "credential": "client:secret-3"}}))
    IcebergCatalogHook("masked_catalog").catalog_properties()
    assert registered == ["client:secret-3"]


def test_spark_submit_registers_inline_settings(registered: list[Any], tmp_path: Path) -> None:
    """A driver elsewhere gets the settings on its command line: every string of them is masked in the logs."""
    cluster = SparkTarget(master="yarn", deploy_mode="cluster", spark_binary="spark-submit")
    with SparkApplicationRun(cluster, prefix="masking-") as run:
        argument = run.settings_argument("--storage-options", {"key": "inline-secret-4", "anon": False})
    assert json.loads(argument) == {"key": "inline-secret-4", "anon": False}
    assert registered == ["inline-secret-4"]
