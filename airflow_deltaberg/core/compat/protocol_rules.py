"""Rules on the protocol action and the enabling table properties."""

from __future__ import annotations

from collections.abc import Iterator

from airflow_deltaberg.core.compat.model import (
    ALL_LEVELS,
    V1,
    V2,
    V3,
    WV1,
    WV3,
    CheckContext,
    Finding,
    Level,
    Rule,
    property_location,
    protocol_location,
)

_SECTION = {
    V1: "protocol: Iceberg Compatibility V1",
    V2: "protocol: Iceberg Compatibility V2",
    WV1: "protocol: IcebergWriterCompatV1",
    V3: "RFC IcebergCompatV3: Iceberg Compatibility V3",
    # No RFC text: Delta Kernel 4.4.0 IcebergWriterCompatV3MetadataValidatorAndUpdater requires the feature.
    WV3: "Delta Kernel 4.4.0 IcebergWriterCompatV3 (required table features and properties)",
}
ROW_TRACKING_PROPERTY = "delta.enableRowTracking"


def reader_version(ctx: CheckContext) -> Iterator[Finding]:
    p = ctx.protocol
    ok = p.min_reader_version == 2 or (
        p.min_reader_version >= 3 and "columnMapping" in (p.reader_features or frozenset())
    )
    if not ok:
        features = sorted(p.reader_features or [])
        yield Finding(
            f"reader version is {p.min_reader_version}"
            + (f" with readerFeatures {features}" if p.min_reader_version >= 3 else "")
            + "; column mapping needs reader version 2, or 3 with columnMapping in readerFeatures",
            protocol_location("minReaderVersion"),
        )


def writer_version(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.protocol.min_writer_version != 7:
        yield Finding(
            f"writer version is {ctx.protocol.min_writer_version}; writer version 7 is required",
            protocol_location("minWriterVersion"),
        )


def column_mapping_feature(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.protocol.min_writer_version >= 7 and "columnMapping" not in (ctx.protocol.writer_features or ()):
        yield Finding("columnMapping is not in writerFeatures", protocol_location("writerFeatures"))


def _feature_listed(level: Level):
    def check(ctx: CheckContext) -> Iterator[Finding]:
        if level.feature not in (ctx.protocol.writer_features or ()):
            yield Finding(f"{level.feature} is not in writerFeatures", protocol_location("writerFeatures"))

    return check


def _property_enabled(level: Level):
    def check(ctx: CheckContext) -> Iterator[Finding]:
        if not ctx.property_true(level.property):
            value = ctx.config.get(level.property)
            state = "is not set" if value is None else f"is {value!r}"
            yield Finding(f"{level.property} {state}; it must be 'true'", property_location(level.property))

    return check


def row_tracking_enabled(ctx: CheckContext) -> Iterator[Finding]:
    if not ctx.supports("rowTracking"):
        yield Finding("the rowTracking feature is not in the protocol", protocol_location("writerFeatures"))
    if not ctx.property_true(ROW_TRACKING_PROPERTY):
        value = ctx.config.get(ROW_TRACKING_PROPERTY)
        state = "is not set" if value is None else f"is {value!r}"
        yield Finding(f"{ROW_TRACKING_PROPERTY} {state}; IcebergCompatV3 requires row tracking",
                      property_location(ROW_TRACKING_PROPERTY))


_UPGRADE_HINT = (
    "upgrade the protocol to reader 3 / writer 7 with columnMapping "
    "(deltaberg enable does this for you)"
)

PROTOCOL_RULES = [
    Rule(
        "protocol.reader-version",
        "Reader version supports column mapping",
        ALL_LEVELS,
        reader_version,
        _UPGRADE_HINT,
        "protocol: IcebergCompatV1/V2/V3, IcebergWriterCompatV1 (column mapping dependency)",
    ),
    Rule(
        "protocol.writer-version",
        "Writer version 7",
        ALL_LEVELS,
        writer_version,
        _UPGRADE_HINT,
        "protocol: IcebergCompatV1/V2/V3, IcebergWriterCompatV1",
    ),
    Rule(
        "protocol.feature.column-mapping",
        "columnMapping in writerFeatures",
        ALL_LEVELS,
        column_mapping_feature,
        "add columnMapping to the protocol (deltaberg enable)",
        "protocol: Column Mapping, table features",
    ),
    Rule(
        "row-tracking.enabled",
        "Row tracking is supported and enabled",
        frozenset({V3}),
        row_tracking_enabled,
        f"add rowTracking (and domainMetadata) to the protocol and set {ROW_TRACKING_PROPERTY}=true",
        "RFC IcebergCompatV3: writers require that Row Tracking be enabled",
    ),
]
for _level in (V1, V2, WV1, V3, WV3):
    _levels = frozenset({_level})
    _short = _level.value
    PROTOCOL_RULES.append(
        Rule(
            f"protocol.feature.{_short}",
            f"{_level.feature} in writerFeatures",
            _levels,
            _feature_listed(_level),
            f"add {_level.feature} to writerFeatures (deltaberg enable)",
            _SECTION[_level],
        )
    )
    PROTOCOL_RULES.append(
        Rule(
            f"property.enable-{_short}",
            f"{_level.property} = true",
            _levels,
            _property_enabled(_level),
            f"set the table property {_level.property}=true (deltaberg enable)",
            _SECTION[_level],
        )
    )
