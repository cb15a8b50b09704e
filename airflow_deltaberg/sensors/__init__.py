"""Airflow sensors of the Deltaberg provider."""

from airflow_deltaberg.sensors.delta_commit import DeltaCommitSensor

__all__ = ["DeltaCommitSensor"]
