"""DeltaToIcebergOperator: writes Iceberg metadata for a Delta table with the core converter and registers it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from airflow.sdk import Asset, AssetAlias, BaseOperator, Context

from airflow_deltaberg.assets import catalog_table_uri
from airflow_deltaberg.core.errors import CatalogIdentifierError, DeltabergError
from airflow_deltaberg.core.iceberg.catalog import check_identifier
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.hooks.catalog import IcebergCatalogHook, masked_properties
from airflow_deltaberg.hooks.storage import DeltaStorageHook
from airflow_deltaberg.openlineage import operators as lineage
from airflow_deltaberg.operators.delta_asset import add_delta_asset, is_template
from airflow_deltaberg.operators.notifier_check import fail_on_broken_notifiers
from airflow_deltaberg.operators.validate import parse_version
from airflow_deltaberg.version_compat import AirflowFailException


def location_uri(location: str) -> str:
    """The asset URI of a table location: ``file://`` + the absolute path for local paths, else the URI."""
    scheme = urlsplit(location).scheme
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = os.path.abspath(location).replace(os.sep, "/")
        return "file://" + quote(path if path.startswith("/") else f"/{path}", safe="/:")
    return location.rstrip("/")


def table_asset_uri(table_uri: str, catalog_name: str, identifier: str | None) -> str:
    """The asset URI of the converted table: the catalog table when an identifier is given, else its location."""
    return catalog_table_uri(catalog_name, identifier) if identifier else location_uri(table_uri)


class DeltaToIcebergOperator(BaseOperator):
    """Convert a Delta table to Iceberg (metadata written next to the Delta log) and register it in a catalog.

    Each run converts up to the latest Delta version (or ``version``): when the Iceberg metadata already
    matches it, nothing is written (mode ``up-to-date``); after an earlier conversion, one Iceberg snapshot per
    new Delta commit is added (mode ``incremental``); the first run, ``full=True``, or a log that no longer
    holds the commits since the last run writes one snapshot listing every live data file (mode ``full``).
    With an ``identifier``, the table is registered in (or its entry moved in) the pyiceberg catalog
    ``catalog_name``, configured by the ``catalog_conn_id`` connection's extra and ``catalog_config`` (which
    wins per key).

    The summary dict (``ConversionResult.to_dict()``: table, mode, delta_version, snapshot_id,
    metadata_location, files_added, files_removed, records, seconds, identifier, snapshots_written) is the
    task's XCom ``return_value``.

    **Asset.** The operator adds the converted table to its ``outlets``:
    ``iceberg://<catalog_name>/<namespace>/<table>`` with an identifier (``db.events`` in catalog
    ``deltaberg`` is ``iceberg://deltaberg/db/events``), else the table location (``file:///...`` for a
    local path, the URI as given otherwise), and the Delta table to its ``inlets`` (``delta://<scheme>/<path>``,
    ``assets.delta_table_uri``). Each successful run emits one asset event (up-to-date runs too; ``mode`` in the
    event's extra tells them apart) whose extra holds delta_version, snapshot_id, mode, files_added, records,
    metadata_location and table. When ``table_uri`` or ``identifier`` is a Jinja template, the URI is only known
    at run time: the operator then declares the asset alias ``asset_alias_name``
    (``deltaberg-convert:<dag_id>.<task_id>``), attaches the rendered table's asset to it, and has no inlet.

    **Failures.** Errors that running again cannot fix (not a Delta table, unsupported features, deletion
    vectors, bad version) fail the task without retries; storage errors are re-raised so ``retries`` apply.

    :param table_uri: the Delta table location (local path or fsspec URI). Templated.
    :param identifier: the catalog identifier (``namespace.table``); None to write the metadata files only,
        without a catalog. Templated.
    :param catalog_config: pyiceberg catalog properties (``type``, ``uri``, ``warehouse``, ...), applied over
        the connection's. Templated: a dict's values are rendered; a template of the whole dict needs the
        DAG's ``render_template_as_native_obj=True``. Keep secrets in the connection: the rendered value of
        this field is stored and shown in the UI.
    :param catalog_conn_id: an Airflow connection whose extra JSON holds pyiceberg catalog properties
        (see ``IcebergCatalogHook``); its secret values are masked in logs.
    :param catalog_name: the pyiceberg catalog name (SQL catalogs key their rows by it).
    :param version: the Delta version to convert; None for the latest. Templated.
    :param full: write a full snapshot even when the table is up to date or could be converted incrementally.
    :param format_version: Iceberg format version, 2 or 3 (deletion vectors in Puffin files, row lineage); default:
        the converted table's, 2 for a new one. 3 on a v2 table upgrades it with a full conversion.
    :param retain_snapshots: expire Iceberg snapshots beyond the newest N (None, with no ``max_snapshot_age``: the
        table property ``deltaberg.history.max-snapshots``, 100).
    :param max_snapshot_age: expire Iceberg snapshots older than this (None: no expiry by age). Snapshots that no
        longer read as Delta (files removed by VACUUM, versions out of the log) expire always (docs/HISTORY.md).
        Only Iceberg metadata files are deleted, never data files.
    :param deltaberg_conn_id: connection for the storage credentials (DeltaStorageHook); None for none.
    :param verify_stats: check the Delta stats of every file converted against its parquet footer before anything
        is written; stats that do not cover a file's data fail the task (``StatsMismatchError``, no retries).
        Off by default: it reads the footer of every converted file.
    :param strict: fail the task (``MisreadDataFileError``, no retries) on data files Iceberg readers misread,
        which are otherwise a warning in the log and the XCom's ``warnings``: timestamps stored as INT64
        TIMESTAMP_MILLIS. Reads the footer of every converted file when the schema has a timestamp column.
    """

    template_fields: Sequence[str] = ("table_uri", "identifier", "catalog_config", "version")
    template_fields_renderers = {"catalog_config": "json"}
    ui_color = "#d5f0e3"

    def __init__(
        self,
        *,
        table_uri: str,
        identifier: str | None = None,
        catalog_config: Mapping[str, Any] | str | None = None,
        catalog_conn_id: str | None = None,
        catalog_name: str = "deltaberg",
        version: int | str | None = None,
        full: bool = False,
        format_version: int | None = None,
        retain_snapshots: int | None = None,
        max_snapshot_age: timedelta | None = None,
        deltaberg_conn_id: str | None = None,
        verify_stats: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.identifier = identifier
        self.catalog_config = dict(catalog_config) if isinstance(catalog_config, Mapping) else catalog_config
        self.catalog_conn_id = catalog_conn_id
        self.catalog_name = catalog_name
        self.version = version
        self.full = full
        self.format_version = format_version
        self.retain_snapshots = retain_snapshots
        self.max_snapshot_age = max_snapshot_age
        self.deltaberg_conn_id = deltaberg_conn_id
        self.verify_stats = verify_stats
        self.strict = strict
        self.table_asset, self.asset_alias = add_iceberg_outlet(self, (table_uri, identifier))
        self.delta_asset = add_delta_asset(self, inlet=True)

    @property
    def asset_alias_name(self) -> str:
        return asset_alias_name(self, "deltaberg-convert")

    def execute(self, context: Context) -> dict[str, Any]:
        fail_on_broken_notifiers(self, context)
        try:
            version = parse_version(self.version)
            identifier = checked_catalog_arguments(self.identifier, self.catalog_config, self.table_uri)
        except ValueError as exc:
            raise AirflowFailException(f"DeltaToIcebergOperator({self.table_uri}): {exc}") from exc
        storage_options = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()
        catalog_config = catalog_properties(self.catalog_conn_id, self.catalog_config, identifier)
        lineage.keep(self, start=True, identifier=identifier, catalog_uri=(catalog_config or {}).get("uri"))
        if catalog_config is not None:
            self.log.info(
                "Converting %s at %s to Iceberg, registered as %s in catalog %r %s",
                self.table_uri, _where(version), identifier, self.catalog_name, masked_properties(catalog_config),
            )
        else:
            self.log.info("Converting %s at %s to Iceberg (no catalog)", self.table_uri, _where(version))
            if self.catalog_config or self.catalog_conn_id:
                self.log.warning("No identifier: the table is not registered; the catalog settings are unused")
        try:
            result = convert(
                self.table_uri,
                storage_options=storage_options,
                catalog_config=catalog_config,
                catalog_name=self.catalog_name,
                identifier=identifier,
                version=version,
                full=bool(self.full),
                format_version=self.format_version,
                verify_stats=bool(self.verify_stats),
                strict=bool(self.strict),
                retain_snapshots=self.retain_snapshots,
                max_snapshot_age_ms=None if self.max_snapshot_age is None
                else int(self.max_snapshot_age.total_seconds() * 1000),
            )
        except DeltabergError as exc:
            if exc.retryable:
                raise
            raise AirflowFailException(self._failure_message(exc, version)) from exc

        self.log.info(summary_line(result))
        for warning in result.warnings:  # what Iceberg readers of the table should know
            self.log.warning("%s: %s", result.table, warning)
        self._emit_asset_event(context, result)
        lineage.keep(self, result=result)
        return result.to_dict()

    def _emit_asset_event(self, context: Context, result: ConversionResult) -> None:
        emit_asset_event(self, context, result)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (the ``openlineage`` extra): the Delta table in, the Iceberg table out."""
        return lineage.conversion(self, complete=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return lineage.conversion(self, complete=False)

    def _failure_message(self, exc: DeltabergError, version: int | None) -> str:
        """The error's message, naming the table and version when the error does not already."""
        message = f"{type(exc).__name__}: {exc}"
        if self.table_uri not in str(exc):
            message += f" (table {self.table_uri}, {_where(version)})"
        return message


def checked_catalog_arguments(identifier: Any, catalog_config: Any, table_uri: str) -> str | None:
    """The rendered identifier (None when empty); ValueError for a non-string identifier, one that names no
    table (``check_identifier``) or a catalog_config that did not render to a mapping."""
    identifier = identifier or None
    if identifier is not None and not isinstance(identifier, str):
        raise ValueError(f"identifier must be a string, not {type(identifier).__name__}")
    if identifier is not None:
        try:
            check_identifier(identifier, table_uri)
        except CatalogIdentifierError as exc:
            raise ValueError(str(exc)) from exc
    if catalog_config is not None and not isinstance(catalog_config, Mapping):
        raise ValueError(
            f"catalog_config must render to a mapping, not {type(catalog_config).__name__} "
            "(a template of the whole dict needs the DAG's render_template_as_native_obj=True)"
        )
    return identifier


def catalog_properties(catalog_conn_id: str | None, catalog_config: Mapping[str, Any] | None,
                       identifier: str | None) -> dict[str, Any] | None:
    """The catalog properties (connection extra, then ``catalog_config``), or None when nothing is registered."""
    if identifier is None:
        return None
    return IcebergCatalogHook(catalog_conn_id=catalog_conn_id).catalog_properties(catalog_config)


def add_iceberg_outlet(task: Any, templated: Sequence[Any]) -> tuple[Asset | None, AssetAlias | None]:
    """Add the Iceberg table the task writes to its outlets: the table's Asset, or, when one of ``templated``
    is a template (the table is known at run time only), the task's asset alias. Returns (asset, alias)."""
    if any(is_template(value) for value in templated):
        alias = AssetAlias(name=task.asset_alias_name)
        task.outlets = [*task.outlets, alias]
        return None, alias
    asset = Asset(uri=table_asset_uri(task.table_uri, task.catalog_name, task.identifier))
    task.outlets = [*task.outlets, asset]
    return asset, None


def asset_alias_name(task: Any, prefix: str) -> str:
    """``<prefix>:<dag id>.<task id>`` (``<prefix>:<task id>`` outside a DAG)."""
    dag_id = task.dag_id if task.has_dag() else None
    return f"{prefix}:{dag_id}.{task.task_id}" if dag_id else f"{prefix}:{task.task_id}"


def emit_asset_event(task: Any, context: Context, result: ConversionResult) -> None:
    """Record the conversion on the task's Iceberg table Asset (or on its alias, when the table is templated)."""
    extra: dict[str, Any] = {
        "table": result.table,
        "mode": result.mode,
        "delta_version": result.delta_version,
        "snapshot_id": result.snapshot_id,
        "metadata_location": result.metadata_location,
        "files_added": result.files_added,
        "records": result.records,
    }
    if result.identifier is not None:
        extra["identifier"] = result.identifier
        extra["catalog_name"] = task.catalog_name
    if task.table_asset is not None:
        context["outlet_events"][task.table_asset].extra = extra
    elif task.asset_alias is not None:
        asset = Asset(uri=table_asset_uri(task.table_uri, task.catalog_name, result.identifier))
        context["outlet_events"][task.asset_alias].add(asset, extra=extra)


def _where(version: int | None) -> str:
    return "the latest version" if version is None else f"version {version}"


def summary_line(result: ConversionResult) -> str:
    registered = f", registered as {result.identifier}" if result.identifier else ""
    return (
        f"Delta -> Iceberg {result.mode}: {result.table} at Delta version {result.delta_version} -> snapshot "
        f"{result.snapshot_id} ({result.records} records, {result.files_added} files added, "
        f"{result.files_removed} removed) in {result.seconds:.2f}s; metadata {result.metadata_location}{registered}"
    )
