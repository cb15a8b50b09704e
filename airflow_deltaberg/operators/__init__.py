"""Airflow operators of the Deltaberg provider."""

from airflow_deltaberg.core.errors import ComplianceViolationError
from airflow_deltaberg.operators.convert import DeltaToIcebergOperator
from airflow_deltaberg.operators.enable import DeltaEnableIcebergWriterCompatOperator
from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator
from airflow_deltaberg.operators.validate import DeltaValidateOperator

__all__ = ["ComplianceViolationError", "DeltaEnableIcebergWriterCompatOperator", "DeltaIcebergRegenerateOperator",
           "DeltaToIcebergOperator", "DeltaValidateOperator"]
