"""``enable``: plan, then pick the path - nothing, one metadata commit, or the data rewrite.

The rewrite is a Spark application outside core; the caller injects how it runs (a ``RewriteRunner``): the CLI
in a local SparkSession (airflow_deltaberg.spark.local_rewrite), the operator through spark-submit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.enable.commit import commit_metadata_only
from airflow_deltaberg.core.enable.levels import DEFAULT_LEVEL, enable_level
from airflow_deltaberg.core.enable.plan import EnablePlan, plan_enable
from airflow_deltaberg.core.errors import DeltaError, EnableBlockedError

log = logging.getLogger(__name__)

MODES = ("auto", "metadata_only", "rewrite")


@dataclass(frozen=True)
class EnableResult:
    """The outcome of ``enable``: ``action`` is dry-run, already-enabled, metadata-only or rewrite."""

    plan: EnablePlan
    action: str
    committed_version: int | None = None
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "committed_version": self.committed_version,
                "seconds": round(self.seconds, 3), "details": self.details, "plan": self.plan.to_dict()}


#: Runs the data rewrite: (location, read_version, storage_options, level) -> the committed version and details.
RewriteRunner = Callable[[str, int, Mapping[str, Any] | None, str], tuple[int, dict[str, Any]]]


def enable(
    location: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    mode: str = "auto",
    level: str = DEFAULT_LEVEL,
    dry_run: bool = False,
    rewrite_runner: RewriteRunner | None = None,
    on_plan: Callable[[EnablePlan], None] | None = None,
) -> EnableResult:
    """Enable ``level`` on the table at ``location``: ``writer-compat-v1`` (IcebergWriterCompatV1, the default),
    ``compat-v2`` (IcebergCompatV2 with column mapping) or ``writer-compat-v3`` (IcebergWriterCompatV3); the plan
    says which known writers can still write the table afterwards (``plan.writers``).

    ``mode``: ``auto`` (metadata-only when the plan allows it, else the data rewrite), ``metadata_only``
    (refused when the data must be rewritten), ``rewrite`` (always rewrite every live file). ``dry_run``
    plans and writes nothing. The rewrite runs ``rewrite_runner`` (the caller's: the CLI runs the Spark
    application in a local SparkSession, the operator submits it; without one a needed rewrite raises
    DeltaError). ``on_plan`` is called with the plan before anything is written. Raises EnableBlockedError
    when refused, CommitConflictError when another writer changed the table in a conflicting way meanwhile.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    target = enable_level(level)
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    snapshot = table.snapshot()
    plan = plan_enable(snapshot, level=target, storage=table.storage)
    if on_plan is not None:
        on_plan(plan)
    if dry_run:
        return EnableResult(plan, "dry-run", seconds=time.monotonic() - started)
    if plan.blockers:
        raise EnableBlockedError(f"{target.title} cannot be enabled: {'; '.join(plan.blockers)}", plan)
    if plan.already_enabled and mode != "rewrite":
        log.info("%s at version %s is already %s-compliant: nothing to do",
                 plan.table, plan.read_version, target.title)
        return EnableResult(plan, "already-enabled", seconds=time.monotonic() - started)
    if mode == "metadata_only" or (mode == "auto" and not plan.needs_rewrite):
        version = commit_metadata_only(table, plan, snapshot.metadata.configuration)
        log.info("Enabled %s on %s in version %s (metadata only)", target.title, plan.table, version)
        return EnableResult(plan, "metadata-only", version, time.monotonic() - started)
    if rewrite_runner is None:
        raise DeltaError("the data files must be rewritten and no rewrite runner was given (the shell passes a "
                         "local Spark one, the operator a spark-submit one); nothing was written",
                         table=plan.table, version=plan.read_version)
    version, details = rewrite_runner(location, plan.read_version, storage_options, target.name)
    log.info("Enabled %s on %s in version %s (data rewritten)", target.title, plan.table, version)
    return EnableResult(plan, "rewrite", version, time.monotonic() - started, details)
