"""A hook that turns an Airflow connection into fsspec storage options for the core library.

Supported connection types:

* ``aws``: login/password are the access key id and secret; extras ``region_name``, ``endpoint_url``,
  ``aws_session_token``. Without keys, s3fs uses its default credential chain (environment, instance
  profile, ...). Assuming a role (``role_arn``) is not supported.
* ``google_cloud_platform``: extras ``keyfile_dict`` (service account JSON), ``key_path`` and ``project``.
  Without a key, gcsfs uses the application default credentials.
* ``wasb`` / ``adls``: login is the storage account name, password its key; extras ``connection_string``,
  ``sas_token``, or ``tenant_id`` + ``client_id`` + ``client_secret`` for a service principal.
* ``deltaberg`` (and ``generic``): the extras are the storage options, passed through unchanged.

Every type also accepts an extra ``storage_options`` object, merged last, for anything not covered above.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_deltaberg.core.redact import MASK, SECRET_MARKERS, is_secret_key, masked_options, option_secrets
from airflow_deltaberg.hooks.masking import mask_secrets
from airflow_deltaberg.provider_info import (
    CATALOG_CONN_TYPE,
    STORAGE_CONN_TYPE,
    connection_type,
    form_fields,
    ui_field_behaviour,
)
from airflow_deltaberg.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow_deltaberg.core.delta import DeltaTable

# One rule for what is a secret: the core library's (core.redact), which also redacts its messages.
__all__ = ["MASK", "SECRET_MARKERS", "DeltaStorageHook", "StorageOptions", "is_secret_key"]

class StorageOptions(dict):  # type: ignore[type-arg]
    """fsspec storage options whose repr and str mask every secret value (at any nesting depth)."""

    def __repr__(self) -> str:
        return f"StorageOptions({masked_options(self)!r})"

    __str__ = __repr__

    def copy(self) -> StorageOptions:
        return StorageOptions(self)

    def secrets(self) -> list[Any]:
        """The values held under secret option names, and the passwords of URL values (core.redact)."""
        return option_secrets(self)


def form_extras(extras: Mapping[str, Any], conn_type: str | None) -> dict[str, Any]:
    """A connection's extras without the form's traces: the ``extra__<type>__`` prefix of older connections
    (``extra__google_cloud_platform__key_path``), and the form fields left empty (``conn-fields`` of the provider
    info), which are not options."""
    prefix = f"extra__{conn_type}__"
    ours = conn_type in (STORAGE_CONN_TYPE, CATALOG_CONN_TYPE)
    empty_form_fields = set(form_fields(conn_type)) if ours and conn_type else set()
    out: dict[str, Any] = {}
    for key, value in extras.items():
        key = key[len(prefix):] if key.startswith(prefix) else key
        if key in empty_form_fields and value in (None, ""):
            continue
        out[key] = value
    return out


class DeltaStorageHook(BaseHook):
    """Credentials for Delta/Iceberg table storage, as fsspec storage options for airflow_deltaberg.core.

    :param deltaberg_conn_id: the Airflow connection; None for local paths and default credentials.
    """

    conn_name_attr = "deltaberg_conn_id"
    default_conn_name = "deltaberg_default"
    conn_type = STORAGE_CONN_TYPE
    hook_name = connection_type(STORAGE_CONN_TYPE)["hook-name"]

    GENERIC_TYPES = (STORAGE_CONN_TYPE, "generic")
    SUPPORTED_TYPES = ("aws", "google_cloud_platform", "wasb", "adls", *GENERIC_TYPES)

    def __init__(self, deltaberg_conn_id: str | None = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deltaberg_conn_id = deltaberg_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The form of the provider info (read from there by Airflow 3.2+; this serves older versions)."""
        return ui_field_behaviour(STORAGE_CONN_TYPE)

    def get_conn(self) -> StorageOptions:
        return self.storage_options()

    def storage_options(self) -> StorageOptions:
        """The fsspec storage options for the connection; empty when no connection id is set."""
        if self.deltaberg_conn_id is None:
            return StorageOptions()
        conn = self.get_connection(self.deltaberg_conn_id)
        conn_type = (conn.conn_type or "").lower()
        builder = {
            "aws": self._aws,
            "google_cloud_platform": self._gcp,
            "wasb": self._azure,
            "adls": self._azure,
        }.get(conn_type)
        if builder is None and conn_type not in self.GENERIC_TYPES:
            raise AirflowException(
                f"connection {self.deltaberg_conn_id!r} has type {conn_type!r}, which DeltaStorageHook "
                f"cannot use; use one of {', '.join(self.SUPPORTED_TYPES)}"
            )
        extras = self._extras(conn)
        if builder is None:  # generic: the extras are the storage options
            options = StorageOptions(extras)
        else:
            options = builder(conn, extras)
            extra_options = extras.get("storage_options") or {}
            if not isinstance(extra_options, Mapping):
                raise AirflowException(
                    f"connection {self.deltaberg_conn_id!r}: extra 'storage_options' must be a JSON object"
                )
            options.update(extra_options)
        mask_secrets(options.secrets())
        return options

    def open_table(self, location: str) -> DeltaTable:
        """The Delta table at ``location``, read with this connection's credentials."""
        from airflow_deltaberg.core.delta import DeltaTable  # the Delta engine only where a table is opened

        return DeltaTable(location, self.storage_options())

    # -- per connection type ----------------------------------------------------------------------

    def _extras(self, conn: Any) -> dict[str, Any]:
        try:
            extras = json.loads(conn.extra) if conn.extra else {}
        except ValueError:
            # Never echo the extra itself: it may hold secrets.
            raise AirflowException(
                f"connection {self.deltaberg_conn_id!r}: the extra field is not valid JSON"
            ) from None
        if not isinstance(extras, dict):
            raise AirflowException(
                f"connection {self.deltaberg_conn_id!r}: the extra field must be a JSON object"
            )
        # Older connections prefix extras with the type, e.g. extra__google_cloud_platform__key_path.
        return form_extras(extras, conn.conn_type)

    def _aws(self, conn: Any, extras: dict[str, Any]) -> StorageOptions:
        if extras.get("role_arn"):
            raise AirflowException(
                f"connection {self.deltaberg_conn_id!r}: role_arn is not supported; give access keys "
                "or leave them empty to use the default AWS credential chain"
            )
        options = StorageOptions()
        key = conn.login or extras.get("aws_access_key_id")
        secret = conn.password or extras.get("aws_secret_access_key")
        if key:
            options["key"] = key
        if secret:
            options["secret"] = secret
        if extras.get("aws_session_token"):
            options["token"] = extras["aws_session_token"]
        if extras.get("endpoint_url"):
            options["endpoint_url"] = extras["endpoint_url"]
        if extras.get("region_name"):
            options["client_kwargs"] = {"region_name": extras["region_name"]}
        return options

    def _gcp(self, conn: Any, extras: dict[str, Any]) -> StorageOptions:
        options = StorageOptions()
        keyfile = extras.get("keyfile_dict")
        if keyfile:
            if isinstance(keyfile, str):
                try:
                    keyfile = json.loads(keyfile)
                except ValueError:
                    raise AirflowException(
                        f"connection {self.deltaberg_conn_id!r}: keyfile_dict is not valid JSON"
                    ) from None
            options["token"] = keyfile
        elif extras.get("key_path"):
            options["token"] = extras["key_path"]
        project = extras.get("project") or extras.get("project_id")
        if project:
            options["project"] = project
        return options

    def _azure(self, conn: Any, extras: dict[str, Any]) -> StorageOptions:
        options = StorageOptions()
        if conn.login:
            options["account_name"] = conn.login
        if extras.get("connection_string"):
            options["connection_string"] = extras["connection_string"]
        if extras.get("sas_token"):
            options["sas_token"] = extras["sas_token"]
        principal = {k: extras[k] for k in ("tenant_id", "client_id", "client_secret") if extras.get(k)}
        options.update(principal)
        if conn.password and "client_secret" not in principal:
            options["account_key"] = conn.password
        return options
