"""The asset URIs of Iceberg tables in a catalog, ``iceberg://<catalog>/<namespace...>/<table>``: built by the
operators (``catalog_table_uri``) and normalized by Airflow through the provider's ``asset-uris`` handler
(``normalize_iceberg_uri``); and of Delta tables, ``delta://<scheme>/<path>`` (``delta_table_uri``), which the
operators read or write and an ``AssetWatcher`` schedules on. Standard library only: the scheduler and the DAG
processor import it."""

from __future__ import annotations

import os
from urllib.parse import SplitResult, quote, unquote

#: The URI scheme of the asset of a table registered in a catalog.
ICEBERG_SCHEME = "iceberg"


#: The URI scheme of the asset of a Delta table.
DELTA_SCHEME = "delta"


def delta_table_uri(table_uri: str) -> str:
    """``delta://<scheme>/<path>`` for a table at ``<scheme>://<path>`` (``s3://lake/sales`` is
    ``delta://s3/lake/sales``); ``delta://file/<absolute path>`` for a local path or a ``file://`` URI."""
    scheme, sep, rest = table_uri.partition("://")
    if not sep:
        scheme, rest = "file", os.path.abspath(table_uri).replace(os.sep, "/")
    return f"{DELTA_SCHEME}://{scheme}/{rest.strip('/')}"


def _segment(text: str) -> str:
    return quote(text, safe="")


def catalog_table_uri(catalog_name: str, identifier: str) -> str:
    """``iceberg://<catalog_name>/<namespace...>/<table>``: one path segment per identifier part (``db.events``
    in catalog ``deltaberg`` is ``iceberg://deltaberg/db/events``)."""
    parts = tuple(identifier.split("."))
    if not catalog_name or len(parts) < 2 or not all(parts):
        raise ValueError(f"cannot build an asset URI from catalog {catalog_name!r} and identifier {identifier!r}")
    return f"{ICEBERG_SCHEME}://{_segment(catalog_name)}/" + "/".join(_segment(p) for p in parts)


def normalize_iceberg_uri(parts: SplitResult) -> SplitResult:
    """Airflow's asset URI handler for ``iceberg://``: the URI in the form ``catalog_table_uri`` builds (each
    segment percent-encoded the same way), or ValueError for one that names no table: no catalog, fewer than a
    namespace and a table, an empty segment, a user, a port or a query."""
    uri = parts.geturl()
    if parts.scheme != ICEBERG_SCHEME:
        raise ValueError(f"not an {ICEBERG_SCHEME}:// asset URI: {uri!r}")
    if "@" in parts.netloc or parts.port is not None or ":" in parts.netloc:
        raise ValueError(f"an {ICEBERG_SCHEME}:// asset URI names a catalog, not a host, user or port: {uri!r}")
    if not parts.netloc:
        raise ValueError(f"an {ICEBERG_SCHEME}:// asset URI needs a catalog name: {uri!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"an {ICEBERG_SCHEME}:// asset URI takes no query or fragment: {uri!r}")
    segments = parts.path.strip("/").split("/") if parts.path.strip("/") else []
    if len(segments) < 2 or not all(segments):
        raise ValueError(
            f"an {ICEBERG_SCHEME}:// asset URI is iceberg://<catalog>/<namespace>/<table>: {uri!r}"
        )
    path = "/" + "/".join(_segment(unquote(s)) for s in segments)
    return parts._replace(netloc=_segment(unquote(parts.netloc)), path=path, query="", fragment="")
