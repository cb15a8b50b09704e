"""The Delta table an operator reads or writes, declared as its inlet or outlet when the table is known at parse
time (``delta://<scheme>/<path>``, ``assets.delta_table_uri``): DAG graphs and the Assets page show it, and a DAG
scheduled on it (an ``AssetWatcher``'s asset) links to the tasks that use it."""

from __future__ import annotations

import re
from typing import Any

from airflow.sdk import Asset

from airflow_deltaberg.assets import delta_table_uri

_TEMPLATE = re.compile(r"{{|{%")


def is_template(value: Any) -> bool:
    """Whether ``value`` is a Jinja template (known at run time only)."""
    return isinstance(value, str) and _TEMPLATE.search(value) is not None


def _assets_in(condition: Any) -> list[Asset]:
    """The assets of a schedule's condition (``AssetAll``/``AssetAny`` nest them in ``objects``)."""
    if isinstance(condition, Asset):
        return [condition]
    return [asset for item in getattr(condition, "objects", ()) for asset in _assets_in(item)]


def _declared(task: Any, uri: str) -> Asset | None:
    """The asset of ``uri`` that the task's DAG schedules on or the task already declares, if any.

    Airflow keeps one asset per (name, uri) of a DAG and the last one it meets wins: a second ``Asset`` of the
    same URI (another name, no watchers) would drop the ``AssetWatcher`` of the schedule's."""
    dag = task.dag if task.has_dag() else None
    scheduled = _assets_in(getattr(dag.timetable, "asset_condition", None)) if dag is not None else []
    for asset in (*scheduled, *task.inlets, *task.outlets):
        if isinstance(asset, Asset) and asset.uri == uri:
            return asset
    return None


def add_delta_asset(task: Any, *, inlet: bool = False, outlet: bool = False) -> Asset | None:
    """Add the Delta table at ``task.table_uri`` to the task's inlets and/or outlets (the DAG's own asset of that
    URI when it has one: its name and watchers are kept); None (nothing added) when the location is a template."""
    if is_template(task.table_uri) or not task.table_uri:
        return None
    uri = delta_table_uri(str(task.table_uri))
    asset = _declared(task, uri) or Asset(uri=uri)
    if inlet and asset not in task.inlets:
        task.inlets = [*task.inlets, asset]
    if outlet and asset not in task.outlets:
        task.outlets = [*task.outlets, asset]
    return asset
