"""The Delta log engine: log segments, columnar action reconciliation, snapshots, commit ranges."""

from airflow_deltaberg.core.delta.models import DomainMetadata, Metadata, Protocol, Transaction
from airflow_deltaberg.core.delta.schema import ArrayType, MapType, PrimitiveType, StructField, StructType
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.delta.table import CommitRange, DeltaTable

__all__ = [
    "ArrayType",
    "CommitRange",
    "DeltaTable",
    "DomainMetadata",
    "MapType",
    "Metadata",
    "PrimitiveType",
    "Protocol",
    "Snapshot",
    "StructField",
    "StructType",
    "Transaction",
]
