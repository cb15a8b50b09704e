"""Rules on table features: IcebergCompatV1 vs V2, deletion vectors, the disallowed features and the
allowlist of IcebergWriterCompatV1."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from airflow_deltaberg.core.compat.model import (
    BEFORE_V3,
    V1,
    V2,
    V3,
    WV1,
    WV3,
    CheckContext,
    Finding,
    Location,
    Rule,
    column_location,
    feature_location,
    property_location,
)
from airflow_deltaberg.core.delta.schema import COLLATIONS_KEY

# IcebergWriterCompatV1 allowlist (RFC). Delta on Spark names the in-commit timestamp feature
# `inCommitTimestamp`, the protocol text `inCommitTimestamps`: accept both.
ALLOWED_FEATURES = frozenset(
    {"appendOnly", "columnMapping", "icebergWriterCompatV1", "icebergCompatV2", "domainMetadata",
     "vacuumProtocolCheck", "v2Checkpoint", "inCommitTimestamp", "inCommitTimestamps", "clustering",
     "timestampNtz", "typeWidening"}
)
# Legacy features that may be supported when inactive; each has its own rule.
ALLOWED_IF_INACTIVE = frozenset({"invariants", "changeDataFeed", "checkConstraints", "identityColumns",
                                 "generatedColumns"})
# Features that must not even be supported; each has its own rule.
NEVER_SUPPORTED = {
    "disallowed.default-columns": ("allowColumnDefaults",),
    "disallowed.row-tracking": ("rowTracking",),
    "disallowed.collations": ("collations", "collations-preview"),
    "disallowed.variant": ("variantType", "variantType-preview", "variantShredding", "variantShredding-preview"),
}
# IcebergWriterCompatV3 allowlist: Delta Kernel 4.4.0 IcebergWriterCompatV3MetadataValidatorAndUpdater
# (COMMON_ALLOWED_FEATURES plus its own), as Kernel names them; the legacy features among them must be inactive
# (their own rules). No RFC text exists for IcebergWriterCompatV3.
V3_ALLOWED_FEATURES = frozenset(
    {"appendOnly", "columnMapping", "domainMetadata", "vacuumProtocolCheck", "v2Checkpoint", "checkpointProtection",
     "inCommitTimestamp", "inCommitTimestamps", "clustering", "timestampNtz", "typeWidening", "typeWidening-preview",
     "catalogManaged", "invariants", "changeDataFeed", "rowTracking", "checkConstraints", "identityColumns",
     "generatedColumns", "icebergCompatV3", "icebergWriterCompatV3", "deletionVectors", "variantType",
     "variantType-preview", "variantShredding", "variantShredding-preview", "allowColumnDefaults", "geospatial",
     "icebergCompatV2", "icebergWriterCompatV1"}
)
IDENTITY_KEYS = ("delta.identity.start", "delta.identity.step", "delta.identity.highWaterMark",
                 "delta.identity.allowExplicitInsert")


def _features(ctx: CheckContext) -> frozenset[str]:
    p = ctx.protocol
    return p.effective_reader_features | p.effective_writer_features


def compat_v1_inactive(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.supports("icebergCompatV1") and ctx.property_true("delta.enableIcebergCompatV1"):
        yield Finding("IcebergCompatV1 is active (feature supported and delta.enableIcebergCompatV1=true)",
                      property_location("delta.enableIcebergCompatV1"))


def compat_v2_inactive(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.supports("icebergCompatV2") and ctx.property_true("delta.enableIcebergCompatV2"):
        yield Finding("IcebergCompatV2 is active (feature supported and delta.enableIcebergCompatV2=true)",
                      property_location("delta.enableIcebergCompatV2"))


def dv_not_supported(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.supports("deletionVectors"):
        yield Finding("the deletionVectors feature is in the protocol", feature_location("deletionVectors"))


def dv_not_active(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.supports("deletionVectors") and ctx.property_true("delta.enableDeletionVectors"):
        yield Finding("deletion vectors are active (delta.enableDeletionVectors=true)",
                      property_location("delta.enableDeletionVectors"))


def no_files_with_dv(ctx: CheckContext) -> Iterator[Finding]:
    dv = ctx.adds.column("deletionVector")
    with_dv = len(dv) - dv.null_count
    if with_dv:
        yield Finding(f"{with_dv} live file(s) carry deletion vectors; Iceberg readers would return the deleted "
                      "rows", Location("table", "files"))


def _columns_with_metadata(ctx: CheckContext, keys: tuple[str, ...], what: str) -> Iterator[Finding]:
    for path, f in ctx.schema.walk():
        found = [k for k in keys if k in f.metadata]
        if found:
            yield Finding(f"the column is {what} ({', '.join(found)})", column_location(path))


def no_invariants(ctx: CheckContext) -> Iterator[Finding]:
    yield from _columns_with_metadata(ctx, ("delta.invariants",), "constrained by an invariant")


def cdf_inactive(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.property_true("delta.enableChangeDataFeed"):
        yield Finding("change data feed is enabled", property_location("delta.enableChangeDataFeed"))


def no_check_constraints(ctx: CheckContext) -> Iterator[Finding]:
    for key in sorted(ctx.config):
        if key.startswith("delta.constraints."):
            yield Finding(f"CHECK constraint {key[len('delta.constraints.'):]} is defined", property_location(key))


def no_identity_columns(ctx: CheckContext) -> Iterator[Finding]:
    yield from _columns_with_metadata(ctx, IDENTITY_KEYS, "an identity column")


def no_generated_columns(ctx: CheckContext) -> Iterator[Finding]:
    yield from _columns_with_metadata(ctx, ("delta.generationExpression",), "a generated column")


def _never_supported(rule_id: str) -> Callable[[CheckContext], Iterator[Finding]]:
    names = NEVER_SUPPORTED[rule_id]

    def check(ctx: CheckContext) -> Iterator[Finding]:
        for name in names:
            if name in _features(ctx):
                yield Finding(f"the {name} feature is supported by the table", feature_location(name))
        if rule_id == "disallowed.collations":
            yield from _columns_with_metadata(ctx, (COLLATIONS_KEY,), "collated")
        if rule_id == "disallowed.variant":
            for path, f in ctx.schema.walk():
                if str(f.type) == "variant":
                    yield Finding("the column has the variant type", column_location(path))

    return check


def feature_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    reported_elsewhere = ALLOWED_IF_INACTIVE | {n for names in NEVER_SUPPORTED.values() for n in names}
    for name in sorted(_features(ctx) - ALLOWED_FEATURES - reported_elsewhere):
        yield Finding(f"the {name} feature is not in the IcebergWriterCompatV1 allowlist", feature_location(name))


def v3_feature_allowlist(ctx: CheckContext) -> Iterator[Finding]:
    for name in sorted(_features(ctx) - V3_ALLOWED_FEATURES):
        yield Finding(f"the {name} feature is not in the IcebergWriterCompatV3 allowlist", feature_location(name))


_RFC = "RFC IcebergWriterCompatV1: disallowed features"
_RFC_AND_KERNEL = f"{_RFC}; Delta Kernel 4.4.0 IcebergWriterCompatV3 (COMMON_CHECKS)"
_ONLY_WV1 = frozenset({WV1})
_WRITER_COMPAT = frozenset({WV1, WV3})

FEATURE_RULES = [
    Rule("compat.v1-inactive", "IcebergCompatV1 is not active", frozenset({V2, WV1, V3}), compat_v1_inactive,
         "unset delta.enableIcebergCompatV1",
         "protocol: IcebergCompatV2 writer requirements; RFC IcebergCompatV3 writer requirements"),
    Rule("compat.v2-inactive", "IcebergCompatV2 is not active", frozenset({V3}), compat_v2_inactive,
         "unset delta.enableIcebergCompatV2", "RFC IcebergCompatV3 writer requirements"),
    Rule("deletion-vectors.not-supported", "Deletion vectors are not supported", frozenset({V1}), dv_not_supported,
         "IcebergCompatV1 cannot be reached once deletionVectors is in the protocol; use IcebergCompatV2",
         "protocol: IcebergCompatV1 writer requirements"),
    Rule("deletion-vectors.not-active", "Deletion vectors are not active", frozenset({V2, WV1}), dv_not_active,
         "set delta.enableDeletionVectors=false", "protocol: IcebergCompatV2 writer requirements"),
    Rule("deletion-vectors.no-live-files", "No live file has a deletion vector", BEFORE_V3, no_files_with_dv,
         "purge the deletion vectors (REORG TABLE ... APPLY (PURGE), or deltaberg enable --mode rewrite)",
         "protocol: Deletion Vectors; Iceberg readers do not apply them"),
    Rule("disallowed.invariants", "No column invariants", _WRITER_COMPAT, no_invariants,
         "drop the invariant from the column metadata", _RFC_AND_KERNEL),
    Rule("disallowed.change-data-feed", "Change data feed is off", _WRITER_COMPAT, cdf_inactive,
         "set delta.enableChangeDataFeed=false", _RFC_AND_KERNEL),
    Rule("disallowed.check-constraints", "No CHECK constraints", _WRITER_COMPAT, no_check_constraints,
         "ALTER TABLE ... DROP CONSTRAINT", _RFC_AND_KERNEL),
    Rule("disallowed.identity-columns", "No identity columns", _WRITER_COMPAT, no_identity_columns,
         "recreate the column without IDENTITY", _RFC_AND_KERNEL),
    Rule("disallowed.generated-columns", "No generated columns", _WRITER_COMPAT, no_generated_columns,
         "recreate the column without GENERATED ALWAYS AS", _RFC_AND_KERNEL),
]
for _rule_id, _title in (
    ("disallowed.default-columns", "Default columns not supported"),
    ("disallowed.row-tracking", "Row tracking not supported"),
    ("disallowed.collations", "Collations not supported"),
    ("disallowed.variant", "Variant types not supported"),
):
    FEATURE_RULES.append(Rule(_rule_id, _title, _ONLY_WV1, _never_supported(_rule_id),
                              "the feature cannot be removed in place: recreate the table without it", _RFC))
FEATURE_RULES.append(
    Rule("features.allowlist", "Every supported feature is allowed", _ONLY_WV1, feature_allowlist,
         "recreate the table without the feature", "RFC IcebergWriterCompatV1: allowed supported features")
)
FEATURE_RULES.append(
    Rule("features.v3-allowlist", "Every supported feature is allowed by IcebergWriterCompatV3", frozenset({WV3}),
         v3_feature_allowlist, "recreate the table without the feature",
         "Delta Kernel 4.4.0 IcebergWriterCompatV3 (ALLOWED_TABLE_FEATURES)")
)
