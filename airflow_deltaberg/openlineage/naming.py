"""The OpenLineage dataset names of the tables the operators read and write, after OpenLineage's naming spec: a
local path is namespace ``file`` and its absolute path; ``s3://bucket/key`` is ``s3://bucket`` and ``key`` (also
``s3a``/``s3n``); ``gs://`` (and ``gcs://``) the same with ``gs``; ``abfss://container@account.dfs.core.windows.net/p``
is that authority and ``p``; any other ``scheme://host/path`` is ``scheme://host`` and ``path``. User names,
passwords, queries and fragments never reach a name. Standard library only."""

from __future__ import annotations

import os
from typing import NamedTuple
from urllib.parse import urlsplit

#: The folder under a Delta table that holds its Iceberg table (metadata and version hint).
ICEBERG_FOLDER = "_iceberg"

_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "abfss", "file": "file"}


class DatasetName(NamedTuple):
    namespace: str
    name: str


def _host(netloc: str, keep_user: bool) -> str:
    """The authority without credentials (an ``abfss`` container is the part before ``@``: kept)."""
    user, at, host = netloc.rpartition("@")
    if not at:
        return netloc
    return f"{user.split(':', 1)[0]}@{host}" if keep_user else host


def dataset_name(location: str) -> DatasetName:
    """The namespace and name of the dataset stored at ``location`` (a local path or a URI)."""
    parts = urlsplit(location)
    if not parts.scheme or (len(parts.scheme) == 1 and os.name == "nt"):
        return DatasetName("file", os.path.abspath(location).replace(os.sep, "/").rstrip("/") or "/")
    scheme = _SCHEMES.get(parts.scheme.lower(), parts.scheme.lower())
    path = parts.path.rstrip("/")
    if scheme == "file":
        return DatasetName("file", path or "/")
    host = _host(parts.netloc, keep_user=scheme == "abfss")
    return DatasetName(f"{scheme}://{host}", path.lstrip("/"))


def iceberg_dataset_name(table_location: str) -> DatasetName:
    """The dataset of the Iceberg table written next to the Delta table at ``table_location``."""
    delta = dataset_name(table_location)
    name = f"{delta.name.rstrip('/')}/{ICEBERG_FOLDER}"
    return DatasetName(delta.namespace, name if delta.namespace == "file" else name.lstrip("/"))


def catalog_namespace(catalog_name: str, catalog_uri: str | None) -> str:
    """The namespace of a table's catalog identifier: the catalog's ``uri`` property without credentials, query
    or fragment (``https://host:8181/api``, ``sqlite:///data/catalog.db``), or ``iceberg://<catalog_name>`` for a
    catalog without one."""
    if not catalog_uri:
        return f"iceberg://{catalog_name}"
    parts = urlsplit(catalog_uri)
    if not parts.scheme:
        return f"iceberg://{catalog_name}"
    return f"{parts.scheme}://{_host(parts.netloc, keep_user=False)}{parts.path}"
