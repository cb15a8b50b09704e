"""Typed forms of the non-file Delta actions: protocol, metaData, txn, domainMetadata, commitInfo."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from airflow_deltaberg.core.delta.schema import StructType, parse_schema

# Features implied by legacy (pre-table-features) protocol versions.
_LEGACY_WRITER_FEATURES = {
    2: {"appendOnly", "invariants"},
    3: {"checkConstraints"},
    4: {"changeDataFeed", "generatedColumns"},
    5: {"columnMapping"},
    6: {"identityColumns"},
}
_LEGACY_READER_FEATURES = {2: {"columnMapping"}}


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] | None = None
    writer_features: frozenset[str] | None = None

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> Protocol:
        rf = action.get("readerFeatures")
        wf = action.get("writerFeatures")
        return cls(
            int(action["minReaderVersion"]),
            int(action["minWriterVersion"]),
            frozenset(rf) if rf is not None else None,
            frozenset(wf) if wf is not None else None,
        )

    def to_action(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = sorted(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = sorted(self.writer_features)
        return out

    @property
    def effective_reader_features(self) -> frozenset[str]:
        """Reader features in force: listed ones on reader version 3, implied ones below."""
        if self.min_reader_version >= 3:
            return self.reader_features or frozenset()
        implied: set[str] = set()
        for version, names in _LEGACY_READER_FEATURES.items():
            if self.min_reader_version >= version:
                implied |= names
        return frozenset(implied)

    @property
    def effective_writer_features(self) -> frozenset[str]:
        """Writer features in force: listed ones on writer version 7, implied ones below."""
        if self.min_writer_version >= 7:
            return self.writer_features or frozenset()
        implied: set[str] = set()
        for version, names in _LEGACY_WRITER_FEATURES.items():
            if self.min_writer_version >= version:
                implied |= names
        return frozenset(implied)

    def supports(self, feature: str) -> bool:
        return feature in self.effective_writer_features or feature in self.effective_reader_features


@dataclass(frozen=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...] = ()
    configuration: dict[str, str] = field(default_factory=dict, hash=False)
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: dict[str, str] = field(default_factory=dict, hash=False)
    created_time: int | None = None

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> Metadata:
        fmt = action.get("format") or {}
        return cls(
            id=action["id"],
            schema_string=action["schemaString"],
            partition_columns=tuple(action.get("partitionColumns") or ()),
            configuration={k: v for k, v in (action.get("configuration") or {}).items()},
            name=action.get("name"),
            description=action.get("description"),
            format_provider=fmt.get("provider", "parquet"),
            format_options=dict(fmt.get("options") or {}),
            created_time=action.get("createdTime"),
        )

    def to_action(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "format": {"provider": self.format_provider, "options": self.format_options},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": self.configuration,
        }
        for key, value in (("name", self.name), ("description", self.description), ("createdTime", self.created_time)):
            if value is not None:
                out[key] = value
        return out

    @cached_property
    def schema(self) -> StructType:
        return parse_schema(self.schema_string)

    @property
    def column_mapping_mode(self) -> str:
        return self.configuration.get("delta.columnMapping.mode", "none")

    @property
    def physical_partition_columns(self) -> tuple[str, ...]:
        """Partition column names as they appear in ``partitionValues`` (physical under column mapping)."""
        if self.column_mapping_mode == "none":
            return self.partition_columns
        schema = self.schema
        return tuple(schema.field(name).physical_name for name in self.partition_columns)

    def bool_property(self, key: str) -> bool:
        return str(self.configuration.get(key, "false")).lower() == "true"


@dataclass(frozen=True)
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False


@dataclass(frozen=True)
class Transaction:
    app_id: str
    version: int
    last_updated: int | None = None
