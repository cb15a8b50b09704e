"""Provider metadata read by Airflow through the `apache_airflow_provider` entry point."""

from __future__ import annotations

from typing import Any

from airflow_deltaberg.version import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-deltaberg",
        "name": "Deltaberg",
        "description": "Keeps Delta Lake tables readable as Apache Iceberg tables: validation of the "
        "IcebergCompat table features, enablement, and Iceberg metadata conversion.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Deltaberg",
                "external-doc-url": "https://github.com/delta-io/delta/blob/master/PROTOCOL.md",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Deltaberg",
                "python-modules": ["airflow_deltaberg.hooks.storage", "airflow_deltaberg.hooks.catalog"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_deltaberg.hooks.storage.DeltaStorageHook",
                "connection-type": "deltaberg",
            },
            {
                "hook-class-name": "airflow_deltaberg.hooks.catalog.IcebergCatalogHook",
                "connection-type": "iceberg_catalog",
            },
        ],
        "operators": [
            {
                "integration-name": "Deltaberg",
                "python-modules": [
                    "airflow_deltaberg.operators.validate",
                    "airflow_deltaberg.operators.convert",
                    "airflow_deltaberg.operators.regenerate",
                    "airflow_deltaberg.operators.enable",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Deltaberg", "python-modules": ["airflow_deltaberg.sensors.delta_commit"]}
        ],
        "triggers": [
            {"integration-name": "Deltaberg", "python-modules": ["airflow_deltaberg.triggers.delta_commit"]}
        ],
        "notifications": [
            "airflow_deltaberg.notifications.compliance.ComplianceEmailNotifier",
            "airflow_deltaberg.notifications.compliance.ComplianceWebhookNotifier",
        ],
    }
