"""Validation entry point: run the rules of a level on a snapshot and return a ComplianceReport."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_deltaberg.core.compat.data_rules import DATA_RULES, sample_paths
from airflow_deltaberg.core.compat.feature_rules import FEATURE_RULES
from airflow_deltaberg.core.compat.model import CheckContext, Level, Rule, Violation
from airflow_deltaberg.core.compat.path_rules import PATH_RULES
from airflow_deltaberg.core.compat.protocol_rules import PROTOCOL_RULES
from airflow_deltaberg.core.compat.report import ComplianceReport
from airflow_deltaberg.core.compat.schema_rules import SCHEMA_RULES
from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.errors import DeltabergError, StorageError

RULES: tuple[Rule, ...] = (*PROTOCOL_RULES, *SCHEMA_RULES, *FEATURE_RULES, *PATH_RULES, *DATA_RULES)
RULES_BY_ID = {rule.id: rule for rule in RULES}
assert len(RULES_BY_ID) == len(RULES), "rule ids must be unique"


def rules_for(level: Level, data_checks: bool) -> list[Rule]:
    levels = set(level.checked_levels())
    return [r for r in RULES if r.levels & levels and (data_checks or not r.data)]


def validate_snapshot(
    snapshot: Snapshot,
    table: DeltaTable,
    level: Level | str = Level.WRITER_COMPAT_V1,
    *,
    data_checks: bool = False,
    sample_size: int | None = 20,
) -> ComplianceReport:
    """Check ``snapshot`` against every rule of ``level``; the data checks read the footers of ``sample_size``
    files spread over the table (None: every live file)."""
    level = Level(level)
    ctx = CheckContext(snapshot, table.storage, sample_size=sample_size)
    rules = rules_for(level, data_checks)
    violations: list[Violation] = []
    for rule in rules:
        try:
            findings = list(rule.check(ctx))
        except DeltabergError:
            raise
        except OSError as exc:
            # I/O trouble (network, throttling) may pass: retryable.
            raise StorageError(
                f"rule {rule.id} could not read what it checks: {exc} (table {snapshot.table}, "
                f"version {snapshot.version})"
            ) from exc
        except ValueError as exc:
            raise DeltabergError(
                f"rule {rule.id} found unreadable data: {exc} (table {snapshot.table}, version {snapshot.version})"
            ) from exc
        violations.extend(
            Violation(rule.id, rule.title, tuple(lv.value for lv in sorted(rule.levels, key=lambda x: x.value)),
                      rule.severity, f.message, f.location, rule.hint, rule.spec)
            for f in findings
        )
    return ComplianceReport(
        table=snapshot.table,
        version=snapshot.version,
        level=level.value,
        levels_checked=tuple(lv.value for lv in level.checked_levels()),
        data_checks=data_checks,
        rules_checked=tuple(r.id for r in rules),
        violations=tuple(violations),
        files_sampled=len(sample_paths(ctx)) if data_checks else 0,
    )


def validate(
    location: str,
    level: Level | str = Level.WRITER_COMPAT_V1,
    *,
    version: int | None = None,
    data_checks: bool = False,
    sample_size: int | None = 20,
    storage_options: Mapping[str, Any] | None = None,
) -> ComplianceReport:
    """Load the table at ``location`` and validate it (latest version unless ``version`` is given)."""
    table = DeltaTable(location, storage_options)
    snapshot = table.snapshot(version)
    return validate_snapshot(snapshot, table, level, data_checks=data_checks, sample_size=sample_size)
