"""A hook that turns an Airflow connection into pyiceberg catalog properties for the core library.

The connection's extra is a JSON object of pyiceberg catalog properties, passed through unchanged (less the fields
of the connection form left empty), e.g.
``{"type": "sql", "uri": "sqlite:////data/catalog.db", "warehouse": "file:///data/warehouse"}`` or
``{"type": "rest", "uri": "https://...", "credential": "client:secret"}``. Any connection type works; only the
extra is read. Values under secret-looking property names (``credential``, ``token``, ``s3.secret-access-key``,
...) and the password of a ``uri`` (``postgresql://user:password@host/db``) are registered with Airflow's
secrets masker, so they never appear in task logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from airflow_deltaberg.core.redact import masked_options
from airflow_deltaberg.hooks.masking import mask_option_secrets
from airflow_deltaberg.hooks.storage import form_extras
from airflow_deltaberg.provider_info import CATALOG_CONN_TYPE, connection_type, ui_field_behaviour
from airflow_deltaberg.version_compat import AirflowException


def masked_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of catalog ``properties`` fit for logs: secret values and passwords in URIs replaced by ***."""
    return masked_options(properties)


def register_secrets(properties: Mapping[str, Any]) -> None:
    """Register the secret values of catalog ``properties`` with Airflow's secrets masker."""
    mask_option_secrets(properties)


class IcebergCatalogHook(BaseHook):
    """pyiceberg catalog properties from an Airflow connection's extra.

    :param catalog_conn_id: the Airflow connection; None for no connection (only explicit properties).
    """

    conn_name_attr = "catalog_conn_id"
    default_conn_name = "deltaberg_catalog_default"
    conn_type = CATALOG_CONN_TYPE
    hook_name = connection_type(CATALOG_CONN_TYPE)["hook-name"]

    def __init__(self, catalog_conn_id: str | None = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.catalog_conn_id = catalog_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The form of the provider info (read from there by Airflow 3.2+; this serves older versions)."""
        return ui_field_behaviour(CATALOG_CONN_TYPE)

    def get_conn(self) -> dict[str, Any]:
        return self.catalog_properties()

    def catalog_properties(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The connection's properties with ``overrides`` applied on top (an override wins per key).

        Secret values of both are registered with the secrets masker.
        """
        properties: dict[str, Any] = {}
        if self.catalog_conn_id is not None:
            properties.update(self._extras())
        if overrides is not None:
            if not isinstance(overrides, Mapping):
                raise AirflowException(f"catalog_config must be a mapping, not {type(overrides).__name__}")
            properties.update(overrides)
        register_secrets(properties)
        return properties

    def _extras(self) -> dict[str, Any]:
        conn = self.get_connection(self.catalog_conn_id)
        if not conn.extra:
            return {}
        try:
            extras = json.loads(conn.extra)
        except ValueError:
            # Never echo the extra itself: it may hold secrets.
            raise AirflowException(
                f"connection {self.catalog_conn_id!r}: the extra field is not valid JSON"
            ) from None
        if not isinstance(extras, dict):
            raise AirflowException(f"connection {self.catalog_conn_id!r}: the extra field must be a JSON object")
        return form_extras(extras, conn.conn_type)
