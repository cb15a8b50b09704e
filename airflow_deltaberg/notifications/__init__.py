"""Airflow notifiers of the Deltaberg provider."""

from airflow_deltaberg.notifications.compliance import ComplianceEmailNotifier, ComplianceWebhookNotifier

__all__ = ["ComplianceEmailNotifier", "ComplianceWebhookNotifier"]
