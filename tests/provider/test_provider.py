"""The package is an Airflow provider: found through its entry point, listed by Airflow itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from airflow_deltaberg import __version__

AIRFLOW = str(Path(sys.executable).parent / "airflow")


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


def test_airflow_cli_lists_the_provider() -> None:
    result = subprocess.run(
        [AIRFLOW, "providers", "list", "--output", "json"],
        capture_output=True, text=True, timeout=180, env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(result.stdout)}
    assert providers["airflow-deltaberg"]["version"] == __version__


def test_airflow_cli_lists_the_hooks_sensor_trigger_and_notifiers() -> None:
    """`airflow providers hooks|triggers|notifications`, and `providers get` for the sensors (Airflow 3.3 has no
    `providers sensors` command). Run side by side: each is a separate Airflow start."""
    commands = {
        "hooks": ["hooks"],
        "triggers": ["triggers"],
        "notifications": ["notifications"],
        "get": ["get", "airflow-deltaberg", "--full"],
    }
    running = {
        name: subprocess.Popen(
            [AIRFLOW, "providers", *args, "--output", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        )
        for name, args in commands.items()
    }
    listed = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name}: {err[-2000:]}"
        listed[name] = json.loads(out)
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
