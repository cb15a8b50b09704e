"""Airflow triggers of the Deltaberg provider (they run on the triggerer)."""

from airflow_deltaberg.triggers.delta_commit import DeltaCommitTrigger
from airflow_deltaberg.triggers.delta_commit_event import DeltaCommitEventTrigger

__all__ = ["DeltaCommitEventTrigger", "DeltaCommitTrigger"]
