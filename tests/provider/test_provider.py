"""The package is an Airflow provider: found through its entry point, listed by Airflow itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg import __version__


def test_entry_point_gives_provider_info() -> None:
    (ep,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_deltaberg")]
    info = ep.load()()
    assert info["package-name"] == "airflow-deltaberg"
    assert info["versions"] == [__version__]
    hook_modules = [m for hook in info["hooks"] for m in hook["python-modules"]]
    for module in hook_modules:
        __import__(module)
    assert {c["connection-type"] for c in info["connection-types"]} == {"deltaberg", "iceberg_catalog"}


def test_provider_info_lists_the_operator_and_notifiers() -> None:
    from airflow.providers_manager import ProvidersManager

    from airflow_deltaberg.operators import DeltaToIcebergOperator
    from airflow_deltaberg.provider_info import get_provider_info

    info = get_provider_info()
    assert [m for op in info["operators"] for m in op["python-modules"]] == [
        "airflow_deltaberg.operators.validate",
        "airflow_deltaberg.operators.convert",
        "airflow_deltaberg.operators.regenerate",
        "airflow_deltaberg.operators.enable",
    ]
    assert DeltaToIcebergOperator.__module__ in info["operators"][0]["python-modules"]
    notifiers = {
        "airflow_deltaberg.notifications.compliance.ComplianceEmailNotifier",
        "airflow_deltaberg.notifications.compliance.ComplianceWebhookNotifier",
    }
    assert set(info["notifications"]) == notifiers
    assert notifiers <= set(ProvidersManager().notification)


def test_providers_manager_registers_the_hook() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert "airflow-deltaberg" in ProvidersManager().providers
    hook = ProvidersManagerTaskRuntime().hooks["deltaberg"]
    assert hook is not None
    assert hook.hook_class_name == "airflow_deltaberg.hooks.storage.DeltaStorageHook"


#: Runs ``airflow providers <args> --output json`` for each command given as JSON in argv[1], through the `airflow`
#: console script's own function (``airflow.__main__.main``), one after another in one process, and prints each
#: command's output: a separate Airflow start costs ~4 CPU s, each further command ~0.7.
AIRFLOW_PROVIDERS = """
import contextlib, io, json, sys
from airflow.__main__ import main

outputs = {}
for name, args in json.loads(sys.argv[1]).items():
    sys.argv = ["airflow", "providers", *args, "--output", "json"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main()
    outputs[name] = json.loads(text.getvalue())
print(json.dumps(outputs))
"""


@pytest.fixture(scope="module")
def listed() -> dict[str, object]:
    """`airflow providers list|hooks|triggers|notifications`, and `providers get` for the sensors (Airflow 3.3 has
    no `providers sensors` command), as a fresh Airflow process lists them."""
    commands = {
        "list": ["list"],
        "hooks": ["hooks"],
        "triggers": ["triggers"],
        "notifications": ["notifications"],
        "get": ["get", "airflow-deltaberg", "--full"],
    }
    result = subprocess.run(
        [sys.executable, "-c", AIRFLOW_PROVIDERS, json.dumps(commands)],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_airflow_cli_lists_the_provider(listed: dict[str, Any]) -> None:
    providers = {p["package_name"]: p for p in listed["list"]}
    assert providers["airflow-deltaberg"]["version"] == __version__


def test_airflow_cli_lists_the_hooks_sensor_trigger_and_notifiers(listed: dict[str, Any]) -> None:
    hooks = {h["connection_type"]: h for h in listed["hooks"]}
    assert hooks["deltaberg"]["class"] == "airflow_deltaberg.hooks.storage.DeltaStorageHook"
    assert hooks["deltaberg"]["package_name"] == "airflow-deltaberg"
    assert hooks["iceberg_catalog"]["class"] == "airflow_deltaberg.hooks.catalog.IcebergCatalogHook"
    triggers = {t["class"]: t for t in listed["triggers"]}
    assert triggers["airflow_deltaberg.triggers.delta_commit"]["package_name"] == "airflow-deltaberg"
    notifiers = {n["notification_class_name"] for n in listed["notifications"]}
    assert {
        "airflow_deltaberg.notifications.compliance.ComplianceEmailNotifier",
        "airflow_deltaberg.notifications.compliance.ComplianceWebhookNotifier",
    } <= notifiers
    (provider,) = listed["get"]
    assert "airflow_deltaberg.sensors.delta_commit" in [m for s in provider["sensors"] for m in s["python-modules"]]


# -- connection forms: read by Airflow 3.3's UI from the provider info, without importing the hooks ----------------


def _ui_metadata() -> dict[str, object]:
    """What Airflow's connection UI gets for the provider's connection types (its /ui/connections/hook_meta)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    HookMetaService.hook_meta_data.cache_clear()
    return {m.connection_type: m for m in HookMetaService.hook_meta_data()
            if m.connection_type in ("deltaberg", "iceberg_catalog")}


def test_connection_forms_come_from_the_provider_info() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    behaviours = manager._field_behaviours_from_metadata
    assert behaviours["deltaberg"]["hidden_fields"] == ["host", "schema", "port", "login", "password"]
    assert behaviours["deltaberg"]["relabeling"] == {"extra": "Storage options (JSON)"}
    assert behaviours["iceberg_catalog"]["relabeling"] == {"extra": "Catalog properties (JSON)"}
    widgets = manager._connection_form_widgets_from_metadata
    assert widgets["extra__deltaberg__secret"].is_sensitive and not widgets["extra__deltaberg__key"].is_sensitive
    assert widgets["extra__iceberg_catalog__credential"].is_sensitive

    meta = _ui_metadata()
    storage, catalog = meta["deltaberg"], meta["iceberg_catalog"]
    assert storage.hook_name == "Delta/Iceberg storage"
    assert catalog.hook_name == "Iceberg catalog (pyiceberg properties)"
    for hidden in ("host", "port", "login", "password", "url_schema"):
        assert getattr(storage.standard_fields, hidden).hidden, hidden
        assert getattr(catalog.standard_fields, hidden).hidden, hidden
    assert set(storage.extra_fields) == {"key", "secret", "endpoint_url"}
    assert storage.extra_fields["secret"]["schema"]["format"] == "password"
    assert set(catalog.extra_fields) == {"type", "uri", "warehouse", "credential"}


def test_the_hooks_serve_the_same_forms_to_older_airflow() -> None:
    from airflow_deltaberg.hooks import DeltaStorageHook, IcebergCatalogHook
    from airflow_deltaberg.provider_info import get_provider_info

    declared = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    for hook in (DeltaStorageHook, IcebergCatalogHook):
        entry = declared[hook.conn_type]
        assert entry["hook-class-name"] == f"{hook.__module__}.{hook.__name__}"
        assert entry["hook-name"] == hook.hook_name
        behaviour = entry["ui-field-behaviour"]
        assert hook.get_ui_field_behaviour() == {
            "hidden_fields": behaviour["hidden-fields"], "relabeling": behaviour["relabeling"],
            "placeholders": behaviour["placeholders"],
        }


def test_provider_info_matches_airflows_schema() -> None:
    import jsonschema
    from airflow import providers_manager

    from airflow_deltaberg.provider_info import get_provider_info

    schema = json.loads((Path(providers_manager.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


# -- asset URIs ------------------------------------------------------------------------------------------------


def test_the_iceberg_asset_scheme_is_registered_with_its_normalizer() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from airflow_deltaberg.assets import normalize_iceberg_uri

    assert ProvidersManagerTaskRuntime().asset_uri_handlers["iceberg"] is normalize_iceberg_uri


@pytest.mark.parametrize(("given", "normalized"), [
    ("iceberg://deltaberg/db/events", "iceberg://deltaberg/db/events"),
    ("iceberg://deltaberg/db/events/", "iceberg://deltaberg/db/events"),
    ("ICEBERG://deltaberg/db/events#x", "iceberg://deltaberg/db/events"),
    ("iceberg://prod/a/b/my table", "iceberg://prod/a/b/my%20table"),
    ("iceberg://prod/a/b/my%20table", "iceberg://prod/a/b/my%20table"),
])
def test_asset_uris_are_normalized_as_the_operators_build_them(given: str, normalized: str) -> None:
    from airflow.sdk import Asset

    assert Asset(uri=given).uri == normalized


@pytest.mark.parametrize("malformed", [
    "iceberg://deltaberg/events",  # no namespace
    "iceberg:///db/events",  # no catalog
    "iceberg://deltaberg/db//events",  # an empty segment
    "iceberg://deltaberg:8181/db/events",  # a port
    "iceberg://deltaberg/db/events?snapshot=1",  # a query
])
def test_malformed_iceberg_asset_uris_are_refused(malformed: str) -> None:
    from airflow.sdk import Asset

    with pytest.raises(ValueError, match="iceberg://"):
        Asset(uri=malformed)
