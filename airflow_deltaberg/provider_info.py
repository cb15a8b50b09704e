"""Provider metadata read by Airflow through the `apache_airflow_provider` entry point.

The connection forms are declared here (``hook-name``, ``ui-field-behaviour``, ``conn-fields``): Airflow 3.2+ reads
them from the provider info without importing the hooks, and ignores a hook's ``get_ui_field_behaviour()`` once
they are there. The hooks serve the same declarations to older Airflow (``ui_field_behaviour``). This module
imports nothing heavy: the scheduler, the API server and the triggerer load it.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_deltaberg.version import __version__

STORAGE_CONN_TYPE = "deltaberg"
CATALOG_CONN_TYPE = "iceberg_catalog"

#: The connection types of the provider, in Airflow's provider-info form.
CONNECTION_TYPES: tuple[dict[str, Any], ...] = (
    {
        "hook-class-name": "airflow_deltaberg.hooks.storage.DeltaStorageHook",
        "hook-name": "Delta/Iceberg storage",
        "connection-type": STORAGE_CONN_TYPE,
        "ui-field-behaviour": {
            "hidden-fields": ["host", "schema", "port", "login", "password"],
            "relabeling": {"extra": "Storage options (JSON)"},
            "placeholders": {
                "extra": '{"key": "...", "secret": "...", "endpoint_url": "...", "client_kwargs": {...}}',
                "key": "access key id (s3fs); empty for the default credential chain",
                "endpoint_url": "https://s3.example.com (S3-compatible stores)",
            },
        },
        "conn-fields": {
            "key": {"label": "Access key id", "description": "fsspec option 'key' (s3fs)",
                    "schema": {"type": ["string", "null"]}},
            "secret": {"label": "Secret access key", "description": "fsspec option 'secret' (s3fs)",
                       "schema": {"type": ["string", "null"], "format": "password"}},
            "endpoint_url": {"label": "Endpoint URL", "description": "fsspec option 'endpoint_url' (s3fs)",
                             "schema": {"type": ["string", "null"]}},
        },
    },
    {
        "hook-class-name": "airflow_deltaberg.hooks.catalog.IcebergCatalogHook",
        "hook-name": "Iceberg catalog (pyiceberg properties)",
        "connection-type": CATALOG_CONN_TYPE,
        "ui-field-behaviour": {
            "hidden-fields": ["host", "schema", "port", "login", "password"],
            "relabeling": {"extra": "Catalog properties (JSON)"},
            "placeholders": {
                "extra": '{"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/wh"}',
                "uri": "sqlite:////data/catalog.db or https://rest-catalog.example.com",
            },
        },
        "conn-fields": {
            "type": {"label": "Catalog type", "description": "pyiceberg property 'type': sql, rest, glue, hive, ...",
                     "schema": {"type": ["string", "null"]}},
            "uri": {"label": "Catalog URI", "description": "pyiceberg property 'uri'",
                    "schema": {"type": ["string", "null"]}},
            "warehouse": {"label": "Warehouse", "description": "pyiceberg property 'warehouse'",
                          "schema": {"type": ["string", "null"]}},
            "credential": {"label": "Credential", "description": "pyiceberg property 'credential' (REST)",
                           "schema": {"type": ["string", "null"], "format": "password"}},
        },
    },
)


def connection_type(conn_type: str) -> dict[str, Any]:
    """The provider-info entry of one of the provider's connection types (a copy)."""
    for entry in CONNECTION_TYPES:
        if entry["connection-type"] == conn_type:
            return copy.deepcopy(entry)
    raise KeyError(f"no connection type {conn_type!r} in this provider")


def ui_field_behaviour(conn_type: str) -> dict[str, Any]:
    """The ``ui-field-behaviour`` of ``conn_type`` in the form of a hook's ``get_ui_field_behaviour()``."""
    behaviour = connection_type(conn_type)["ui-field-behaviour"]
    return {
        "hidden_fields": behaviour.get("hidden-fields", []),
        "relabeling": behaviour.get("relabeling", {}),
        "placeholders": behaviour.get("placeholders", {}),
    }


def form_fields(conn_type: str) -> tuple[str, ...]:
    """The names of the extra fields the connection form of ``conn_type`` adds (``conn-fields``)."""
    return tuple(connection_type(conn_type).get("conn-fields", {}))


#: The asset URI schemes the operators emit of their own, with the handler that normalizes (and checks) them.
#: The table locations' schemes (file, s3, gs, abfss, ...) belong to Airflow and the storage providers.
ASSET_URIS: tuple[dict[str, Any], ...] = (
    {"schemes": ["iceberg"], "handler": "airflow_deltaberg.assets.normalize_iceberg_uri"},
)


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
        "connection-types": copy.deepcopy(list(CONNECTION_TYPES)),
        "asset-uris": copy.deepcopy(list(ASSET_URIS)),
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
            {"integration-name": "Deltaberg", "python-modules": ["airflow_deltaberg.triggers.delta_commit",
                                                                 "airflow_deltaberg.triggers.delta_commit_event"]}
        ],
        "notifications": [
            "airflow_deltaberg.notifications.compliance.ComplianceEmailNotifier",
            "airflow_deltaberg.notifications.compliance.ComplianceWebhookNotifier",
        ],
    }
