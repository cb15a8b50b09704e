"""The rules of IcebergCompatV1, IcebergCompatV2 and IcebergWriterCompatV1, and the compliance report."""

from airflow_deltaberg.core.compat.model import Level, Rule, Severity, Violation
from airflow_deltaberg.core.compat.report import ComplianceReport
from airflow_deltaberg.core.compat.validate import RULES, RULES_BY_ID, rules_for, validate, validate_snapshot

__all__ = [
    "RULES",
    "RULES_BY_ID",
    "ComplianceReport",
    "Level",
    "Rule",
    "Severity",
    "Violation",
    "rules_for",
    "validate",
    "validate_snapshot",
]
