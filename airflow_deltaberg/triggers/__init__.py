"""Airflow triggers of the Deltaberg provider (they run on the triggerer)."""

from airflow_deltaberg.triggers.delta_commit import DeltaCommitTrigger

__all__ = ["DeltaCommitTrigger"]
