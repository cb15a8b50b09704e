"""The typed errors of the core library: every exception class of airflow_deltaberg is defined here.

Every message names the table, and where it applies the version and the file at fault, plus what to do.

**Stable names.** The name of each DeltabergError subclass is its stable name: the Spark applications report a
failure by that name and the operators rebuild the same class from it (``error_classes()``, used by
``airflow_deltaberg.spark.protocol``). Renaming or removing a class is a change of that protocol. ``retryable``
says whether running the same step again can help; it travels with the name.

**One hierarchy.** Every class derives from DeltabergError. The format errors of the core's own decoders
(``AvroContainerError``, ``RoaringFormatError``, ``StatsParseError``, ``StatsCountError``, ``SchemaError``) are
ValueErrors too: the modules that decode call them on bytes or strings and catch ``ValueError`` around pyarrow's and
json's own errors in the same place.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from airflow_deltaberg.core.redact import location_text, strip_userinfo


class DeltabergError(Exception):
    """Base of every error raised by airflow_deltaberg.core."""

    #: False where running the same step again cannot help (bad input, unsupported table).
    retryable: bool = False


class StorageError(DeltabergError):
    """Storage could not be read or written."""

    retryable = True


class StorageConfigError(StorageError):
    """A location or storage configuration that cannot work (unknown scheme, missing filesystem package)."""

    retryable = False


class LinkOutsideTableError(StorageConfigError):
    """A folder the converter writes into (``_iceberg`` or one below it) is a link that resolves outside the
    table root: writing through it would put the files of this table into another place (another table's
    ``_iceberg``). Refused before anything is written."""


class FileAlreadyExistsError(StorageError):
    """A write-if-absent found the key already there with other bytes than it meant to write (another writer won;
    the same bytes are this writer's own write whose response was lost, and count as written)."""

    retryable = False


class StorageTimeoutError(StorageError):
    """An object-store call (with the client's own retries) did not end within its bound (``core.storage``:
    the ``deltaberg_timeout_s`` storage option or DELTABERG_STORAGE_TIMEOUT_S). The message names the call and the
    file; a stalled or overloaded store may answer the next run."""

    retryable = True


class StorageWriteRefusedError(StorageError):
    """A write the storage refuses for a reason that stays until someone acts: no space left (or over quota), a
    read-only filesystem, permission denied. Running the same step again meets the same refusal."""

    retryable = False


class DeltaError(DeltabergError):
    """A problem with a Delta table or its log."""

    def __init__(self, message: str, *, table: str, version: int | None = None, file: str | None = None):
        # A location is shown without the credentials of its URL (core.redact).
        self.table = location_text(table)
        self.version = version
        self.file = location_text(file) if file is not None else None
        where = [f"table {self.table}"]
        if version is not None:
            where.append(f"version {version}")
        if self.file is not None:
            where.append(f"file {self.file}")
        super().__init__(strip_userinfo(f"{message} ({', '.join(where)})"))


class NotADeltaTableError(DeltaError):
    """The location has no `_delta_log` with any commit or checkpoint."""


class VersionNotFoundError(DeltaError):
    """The requested version is not in the log or can no longer be reconstructed."""


class CorruptLogError(DeltaError):
    """A log file cannot be parsed or breaks the protocol."""


class PathOutsideTableError(CorruptLogError):
    """A relative path in the log (a data file or a deletion vector) resolves outside the table root."""


class StatsMismatchError(CorruptLogError):
    """A data file's add action does not match the file: its Delta stats do not cover its data, its size is not
    the file's, or the schema's types are not the file's. Delta readers, and Iceberg readers of a conversion, would
    skip its rows or fail to read it. Raised by ``convert(verify_stats=True)``; ``file`` is the data file."""


class MissingDataFileError(DeltaError):
    """A live data file of the Delta table is not in storage; ``file`` is the data file."""


class CorruptDataFileError(DeltaError):
    """A live data file of the Delta table cannot be read as parquet; ``file`` is the data file."""


class MisreadDataFileError(DeltaError):
    """A data file that Iceberg readers of a conversion would misread: timestamps stored as INT64 TIMESTAMP_MILLIS
    (Delta allows them, Iceberg stores microseconds; Iceberg Java's row-group filter then skips matching rows).
    Raised by ``convert(strict=True)`` in place of the warning, before anything is written; ``file`` is the data
    file and the message names its columns."""


class DataCheckMemoryError(DeltaError):
    """Checking a data file's values (``validate --data-checks``, ``convert --verify-stats``) needs more memory than
    the data checks' budget (``DELTABERG_DATA_CHECK_MEMORY_MB``, 512 MB by default): a file that decompresses to far
    more than it holds. ``file`` is the data file; nothing was checked beyond the budget."""


class MissingCheckpointPartError(CorruptLogError):
    """A checkpoint that the snapshot needs lacks a part or a sidecar."""


class UnsupportedFeatureError(DeltaError):
    """The table uses a reader feature or a protocol version this project does not implement."""


class CommitConflictError(DeltaError):
    """Another writer committed the version this commit wanted; nothing was written."""

    retryable = False


class TableDefinitionError(DeltaError):
    """A table cannot be created as asked (location taken, schema, partitioning or properties not allowed)."""


class PartitionValueError(DeltabergError):
    """A partition value that does not parse as its column's type."""


class ConcurrentConversionError(DeltabergError):
    """Another conversion published the same Iceberg metadata version first."""

    # Running again starts from the state the other converter published.
    retryable = True


class ConversionStateError(DeltabergError):
    """The conversion state kept beside the Iceberg metadata does not match the manifest it describes (a file
    changed or damaged after it was written). An incremental conversion that meets it falls back to a full one,
    which writes both again."""


class TablePropertyError(DeltabergError):
    """An Iceberg table property the converter follows (manifest merging, metadata files kept) has a value it cannot
    use; nothing was written."""


class DeleteFileMismatchError(DeltabergError):
    """A delete file already at its deterministic name does not hold the rows this conversion derives."""


class UnsupportedTypeError(DeltabergError):
    """A Delta type that has no exact Iceberg counterpart: converting would change what readers see."""


class TypeChangeRefusedError(DeltaError):
    """A column changed type in a way Iceberg cannot evolve (not an allowed promotion) while Delta's column mapping
    pins its field id: Iceberg readers would read the old type's files and bounds as the new type."""


class ColumnTypeChangeError(DeltabergError):
    """A column whose type changed while column mapping keeps its field id, found where a schema is converted
    (no table known there); ``core.iceberg.schema.convert_schema`` turns it into a TypeChangeRefusedError."""


class CatalogError(DeltabergError):
    """The catalog cannot be opened or updated (configuration, connectivity, missing namespace...)."""


class CatalogIdentifierError(CatalogError):
    """A catalog identifier that names no table (an empty part, no namespace, control characters): refused
    before anything is written."""


class EnableBlockedError(DeltaError):
    """Enabling is refused: the table uses features that cannot be made compliant, or the chosen mode
    cannot do what the plan needs. Nothing was written."""

    def __init__(self, message: str, plan: Any):
        super().__init__(message, table=plan.table, version=plan.read_version)
        self.plan = plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_blocked, (str(self), self.plan))


class ComplianceViolationError(DeltabergError):
    """The table breaks rules of the compliance level it was validated against. ``report`` is the
    ComplianceReport (core.compat.report); the message is its summary, which lists the violated rules."""

    def __init__(self, report: Any) -> None:
        super().__init__(report.summary())
        self.report = report

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.report,))


class NotifierConfigError(DeltabergError):
    """A notifier whose connection cannot deliver (missing connection, no sender, a URL that is not http(s), an
    extra header that is not text): found when the task starts, before any alert goes out. The message names the
    connection and the key, never a value."""


class FleetDiscoveryError(DeltabergError):
    """The tables of a fleet cannot be listed: a prefix, list file or Variable that is missing or malformed, or
    more tables (or deeper folders) than the bound allows."""


class SparkStartError(DeltabergError):
    """A local Spark could not start: the jars or the Java it needs are missing, or its JVM exited. The message
    names what was looked for and where."""


class AvroContainerError(DeltabergError, ValueError):
    """Bytes that are not a well-formed Avro object container file."""


class RoaringFormatError(DeltabergError, ValueError):
    """Bytes that are not a valid serialized roaring bitmap (truncated, unsorted, unknown cookie)."""


class StatsParseError(DeltabergError, ValueError):
    """A stats string that is not JSON; ``row`` is its index in the array given to ``parse_stats``, ``path`` the
    data file of its add once a caller knows it. Callers that know where the row comes from turn it into a
    CorruptLogError naming the table, version and file."""

    def __init__(self, message: str, row: int, path: str | None = None) -> None:
        super().__init__(message)
        self.row = row
        self.path = path

    def moved(self, offset: int) -> StatsParseError:
        """The same error for a row ``offset`` further on (the array was a slice starting there)."""
        return StatsParseError(str(self), self.row + offset, self.path)

    def of(self, path: str | None) -> StatsParseError:
        """The same error, naming the data file whose add holds the stats."""
        return StatsParseError(str(self), self.row, path)

    def describe(self) -> str:
        return f"the add of {self.path} has {self}"


class StatsCountError(DeltabergError, ValueError):
    """A numRecords or nullCount in a stats object that is not an int64 count. core.delta.stats.stats turns it into a
    StatsParseError naming the row."""


class IcebergMetadataError(DeltaError):
    """An Iceberg metadata file that cannot be read for what was asked of it: not JSON, not format version 2 or 3,
    no current schema, or a location that is not a metadata file of the table. ``file`` is the metadata file."""


class IcebergStartError(DeltaError):
    """The table's Iceberg metadata cannot give a start version (unreadable, or no ``delta-version``)."""


class SchemaError(DeltabergError, ValueError):
    """A schema string that does not follow the Delta schema serialization format."""


def _rebuild_blocked(message: str, plan: Any) -> EnableBlockedError:
    err = EnableBlockedError.__new__(EnableBlockedError)
    Exception.__init__(err, message)
    err.table, err.version, err.file, err.plan = plan.table, plan.read_version, None, plan
    return err


@functools.cache
def error_classes() -> Mapping[str, type[DeltabergError]]:
    """Every DeltabergError class of this module (the base included) by its stable name."""
    found: dict[str, type[DeltabergError]] = {}
    pending: list[type[DeltabergError]] = [DeltabergError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == __name__ and cls.__name__ not in found:
            found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return MappingProxyType(dict(sorted(found.items())))
