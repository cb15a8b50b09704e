"""What the operators' ``get_openlineage_facets_on_complete`` / ``_on_failure`` return: the facets of
``facets`` filled from the operator's rendered fields and what its ``execute`` kept (``lineage_state``). A schema
that cannot be read leaves the schema and column lineage facets out (logged), never the event."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from airflow_deltaberg.hooks.storage import DeltaStorageHook
from airflow_deltaberg.openlineage import facets
from airflow_deltaberg.openlineage.schemas import Column, delta_columns, iceberg_columns

log = logging.getLogger(__name__)

#: The attribute where ``execute`` keeps what the lineage needs (a dict).
STATE = "_openlineage_state"


def keep(task: Any, *, start: bool = False, **state: Any) -> None:
    """Keep ``state`` on the task for its lineage (called from ``execute``; ``start``: forget an earlier try's)."""
    setattr(task, STATE, {**({} if start else getattr(task, STATE, {})), **state})


def _state(task: Any) -> dict[str, Any]:
    return getattr(task, STATE, {})


def _columns(task: Any, read: Callable[[Any], Sequence[Column]]) -> Sequence[Column] | None:
    try:
        return read(DeltaStorageHook(deltaberg_conn_id=task.deltaberg_conn_id).storage_options())
    except Exception as exc:  # lineage is a by-product: the run's outcome stands without its schema
        log.warning("OpenLineage: no schema for %s: %s: %s", task.table_uri, type(exc).__name__, exc)
        return None


def conversion(task: Any, complete: bool) -> Any:
    """Convert or regenerate: the Delta table in, the Iceberg table out."""
    state = _state(task)
    result = state.get("result") if complete else None
    identifier = result.identifier if result is not None else (state.get("identifier") or task.identifier or None)
    columns = None
    if result is not None and result.metadata_location:
        columns = _columns(task, lambda options: iceberg_columns(result.table, result.metadata_location, options))
    return facets.conversion_lineage(
        str(task.table_uri), identifier=identifier, catalog_name=str(task.catalog_name),
        catalog_uri=state.get("catalog_uri"), columns=columns,
        delta_version=None if result is None else result.delta_version,
        snapshot_id=None if result is None else result.snapshot_id,
    )


def validation(task: Any, complete: bool) -> Any:
    """Validate: the Delta table in, the report's rules as assertions (also when the task failed on them)."""
    state = _state(task)
    report, schema = state.get("report"), state.get("schema")
    version = None if report is None else report["version"]
    columns = None if schema is None else delta_columns(schema)
    return facets.validation_lineage(str(task.table_uri), version=version, columns=columns, report=report)


def enablement(task: Any, complete: bool) -> Any:
    """Enable: the Delta table in at the planned version, out at the committed one."""
    state = _state(task)
    plan = state.get("plan") or {}
    result = state.get("result") if complete else None
    read_version = plan.get("read_version")
    committed = None if result is None else result.committed_version
    # The schema committed, else the one read: both in the plan.
    schema = (plan.get("metadata") or {}).get("schemaString") if committed is not None else state.get("read_schema")
    columns = delta_columns(schema) if schema else None
    return facets.enable_lineage(str(task.table_uri), read_version=read_version, committed_version=committed,
                                 columns=columns)
