"""Airflow hooks of the deltaberg provider."""

from airflow_deltaberg.hooks.catalog import IcebergCatalogHook
from airflow_deltaberg.hooks.storage import DeltaStorageHook, StorageOptions

__all__ = ["DeltaStorageHook", "IcebergCatalogHook", "StorageOptions"]
