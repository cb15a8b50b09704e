"""Typed forms of the non-file Delta actions: protocol, metaData, txn, domainMetadata, commitInfo."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from airflow_deltaberg.core.delta.schema import (
    MAX_COLUMN_ID,
    PrimitiveType,
    StructType,
    check_column_mapping,
    column_ids,
    parse_schema,
)

# Features implied by legacy (pre-table-features) protocol versions.
_LEGACY_WRITER_FEATURES = {
    2: {"appendOnly", "invariants"},
    3: {"checkConstraints"},
    4: {"changeDataFeed", "generatedColumns"},
    5: {"columnMapping"},
    6: {"identityColumns"},
}
_LEGACY_READER_FEATURES = {2: {"columnMapping"}}

# In-commit timestamps: on when the property is true and the protocol supports the writer feature (Delta on
# Spark names it inCommitTimestamp, the protocol text inCommitTimestamps).
ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ICT_FEATURES = frozenset({"inCommitTimestamp", "inCommitTimestamps"})


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] | None = None
    writer_features: frozenset[str] | None = None

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> Protocol:
        """The protocol of a ``protocol`` action; a ValueError names a field that is missing or of the wrong
        type."""
        rf = _optional(action, "readerFeatures", _is_string_list, "a list of strings")
        wf = _optional(action, "writerFeatures", _is_string_list, "a list of strings")
        protocol = cls(
            _required(action, "minReaderVersion", is_int, "an integer"),
            _required(action, "minWriterVersion", is_int, "an integer"),
            frozenset(rf) if rf is not None else None,
            frozenset(wf) if wf is not None else None,
        )
        protocol.check()
        return protocol

    def check(self) -> None:
        """Raise ValueError for a protocol the protocol text makes invalid, where reading it anyway would guess
        which features are in force (and with column mapping or deletion vectors, which rows the table has).

        - Versions start at 1 (reader versions 1-3, writer versions 1-7 are defined).
        - "readerFeatures ... (exist only when `minReaderVersion` is set to `3`)", "writerFeatures ... (exist only
          when `minWriterVersion` is set to `7`)" (Protocol Evolution); and "When the table's Reader Version is 3,
          `readerFeatures` must exist in the `protocol` action, and when the Writer Version is 7,
          `writerFeatures` must exist in the `protocol` action" (Table Features). A reader version above 3 is a
          protocol this project does not know: refused as unsupported (check_readable), whatever it lists.
        """
        for name, version in (("minReaderVersion", self.min_reader_version),
                              ("minWriterVersion", self.min_writer_version)):
            if version < 1:
                raise ValueError(f"{name} {version} is not a protocol version (they start at 1)")
        if self.min_reader_version > 3 or self.min_writer_version > 7:
            return
        if self.reader_features is not None and self.min_reader_version < 3:
            raise ValueError(f"readerFeatures are listed with reader version {self.min_reader_version}; they exist "
                             "only with reader version 3")
        if self.writer_features is not None and self.min_writer_version < 7:
            raise ValueError(f"writerFeatures are listed with writer version {self.min_writer_version}; they exist "
                             "only with writer version 7")
        if self.min_reader_version == 3 and self.reader_features is None:
            raise ValueError("reader version 3 needs readerFeatures (the protocol lists none)")
        if self.min_writer_version == 7 and self.writer_features is None:
            raise ValueError("writer version 7 needs writerFeatures (the protocol lists none)")

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
        """The metadata of a ``metaData`` action; a ValueError names a field that is missing or of the wrong
        type. The schema string is parsed when first used (``schema``)."""
        # The protocol's required fields: Delta on Spark (NullPointerException) and delta-kernel refuse a metaData
        # without format, format.provider, partitionColumns or configuration.
        fmt = _required(action, "format", _is_dict, "an object")
        return cls(
            id=_required(action, "id", _is_str, "a string"),
            schema_string=_required(action, "schemaString", _is_str, "a string"),
            partition_columns=tuple(_required(action, "partitionColumns", _is_string_list, "a list of strings")),
            configuration=dict(_required(action, "configuration", _is_string_map, "an object of strings")),
            name=_optional(action, "name", _is_str, "a string"),
            description=_optional(action, "description", _is_str, "a string"),
            format_provider=_required(fmt, "provider", _is_str, "a string", "format."),
            format_options=dict(_optional(fmt, "options", _is_string_map, "an object of strings", "format.") or {}),
            created_time=_optional(action, "createdTime", is_int, "an integer"),
        )

    @staticmethod
    def check_containers(action: Mapping[str, Any]) -> None:
        """Raise ValueError when the ``format`` or ``configuration`` of a ``metaData`` action is there but not an
        object, or its ``partitionColumns`` not a list. For a metaData that a later one replaces: Delta Live Tables
        writes one without schemaString, which Delta readers skip, and Delta on Spark reads a value of another type
        into a string field as its JSON text, but neither it (MALFORMED_RECORD_IN_PARSING) nor delta-kernel reads a
        line whose format, configuration or partitionColumns is of another kind."""
        for key in ("format", "configuration"):
            _optional(action, key, _is_dict, "an object")
        _optional(action, "partitionColumns", lambda value: isinstance(value, list), "a list")

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

    def check(self) -> None:
        """Parse the schema and raise ValueError (SchemaError) for what the protocol makes invalid in it or in the
        partition columns: a partition column that is not a column, is listed twice (Delta's readers refuse
        both), or has a nested type (Delta partitions by primitive values; a partition value is one string); and
        under column mapping, columns a reader could not tell apart (schema.check_column_mapping: "every column -
        nested or leaf - is assigned a unique physical name, and a unique 32-bit integer as an id")."""
        schema = self.schema
        seen: set[str] = set()
        for name in self.partition_columns:
            if name in seen:
                raise ValueError(f"the partition column {name!r} is listed twice")
            seen.add(name)
            try:
                column = schema.field(name)
            except KeyError:
                raise ValueError(f"the partition column {name!r} is not in the schema") from None
            if not isinstance(column.type, PrimitiveType):
                kind = "struct" if isinstance(column.type, StructType) else column.type.to_json()["type"]
                raise ValueError(f"the partition column {name!r} has the type {kind}; a partition column must have "
                                 "a primitive type")
        if self.column_mapping_mode in ("id", "name"):
            check_column_mapping(schema)

    def column_id_above_max(self) -> tuple[int, int] | None:
        """Under column mapping, (the largest id, ``delta.columnMapping.maxColumnId``) when the schema uses an id
        above the maximum the writers assigned; None otherwise, and when no integer maximum is declared."""
        if self.column_mapping_mode not in ("id", "name"):
            return None
        try:
            declared = int(self.configuration[MAX_COLUMN_ID])
        except (KeyError, TypeError, ValueError):
            return None
        ids = column_ids(self.schema)
        return (max(ids), declared) if ids and max(ids) > declared else None

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


def is_int(value: Any) -> bool:
    """A JSON integer (not a boolean, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _required(action: Mapping[str, Any], key: str, check: Callable[[Any], bool], what: str, prefix: str = "") -> Any:
    if action.get(key) is None:
        raise ValueError(f"the field {prefix}{key} is missing")
    return _optional(action, key, check, what, prefix)


def _optional(action: Mapping[str, Any], key: str, check: Callable[[Any], bool], what: str, prefix: str = "") -> Any:
    value = action.get(key)
    if value is not None and not check(value):
        text = repr(value)
        raise ValueError(f"{prefix}{key} is {text if len(text) <= 80 else text[:77] + '...'}, not {what}")
    return value


@dataclass(frozen=True)
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> DomainMetadata:
        return cls(
            _required(action, "domain", _is_str, "a string"),
            _optional(action, "configuration", _is_str, "a string") or "",
            bool(_optional(action, "removed", _is_bool, "a boolean")),
        )


@dataclass(frozen=True)
class Transaction:
    app_id: str
    version: int
    last_updated: int | None = None

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> Transaction:
        return cls(
            _required(action, "appId", _is_str, "a string"),
            _required(action, "version", is_int, "an integer"),
            _optional(action, "lastUpdated", is_int, "an integer"),
        )
