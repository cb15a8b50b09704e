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
    assert {c["connection-type"] for c in info["connection-types"]} == {"deltaberg"}


def test_provider_info_lists_the_operator_and_notifiers() -> None:
    from airflow.providers_manager import ProvidersManager

    from airflow_deltaberg.operators import DeltaToIcebergOperator
    from airflow_deltaberg.provider_info import get_provider_info

    info = get_provider_info()
    assert [m for op in info["operators"] for m in op["python-modules"]] == [
        "airflow_deltaberg.operators.validate",
        "airflow_deltaberg.operators.convert",
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
