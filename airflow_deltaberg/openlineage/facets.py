"""The OpenLineage datasets and facets of the operators' runs, returned to Airflow's OpenLineage provider (its
``OperatorLineage``) from the operators' ``get_openlineage_facets_on_complete`` / ``_on_failure``.

- the Delta table: an input (an output too when ``enable`` commits to it), named from its location
  (``naming.dataset_name``); schema, version (the Delta version) and storage (``delta``, parquet) facets;
- the Iceberg table beside it (``<table>/_iceberg``): an output with schema, version (the snapshot id), storage
  (``iceberg``, parquet), symlinks (the catalog identifier, when registered) and column lineage (each column is the
  Delta column of the same name, unchanged: identity);
- validation: the rules checked as data-quality assertions on the Delta input (``success`` False for a rule with a
  violation of severity error).

The OpenLineage client is imported here only, when the provider calls (the ``openlineage`` extra)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_deltaberg.openlineage.naming import DatasetName, catalog_namespace, dataset_name, iceberg_dataset_name
from airflow_deltaberg.openlineage.schemas import Column


def _schema_facet(columns: Sequence[Column]) -> Any:
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields

    def fields(cols: Sequence[Column]) -> list[Any]:
        return [SchemaDatasetFacetFields(name=c.name, type=c.type, ordinal_position=i, fields=fields(c.fields))
                for i, c in enumerate(cols, start=1)]

    return SchemaDatasetFacet(fields=fields(columns))


def table_facets(layer: str, version: Any, columns: Sequence[Column] | None) -> dict[str, Any]:
    """The storage facet of a ``layer`` (delta, iceberg) table, its version and schema facets when known."""
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet

    facets: dict[str, Any] = {"storage": StorageDatasetFacet(storageLayer=layer, fileFormat="parquet")}
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(version))
    if columns:
        facets["schema"] = _schema_facet(columns)
    return facets


def _identity_lineage(source: DatasetName, columns: Sequence[Column]) -> Any:
    from openlineage.client.generated.column_lineage_dataset import (
        ColumnLineageDatasetFacet,
        Fields,
        InputField,
        Transformation,
    )

    identity = Transformation(type="DIRECT", subtype="IDENTITY",
                              description="the Delta data file itself, read through Iceberg metadata")
    return ColumnLineageDatasetFacet(fields={
        c.name: Fields(inputFields=[InputField(namespace=source.namespace, name=source.name, field=c.name,
                                               transformations=[identity])],
                       transformationType="IDENTITY", transformationDescription="no copy: the same data files")
        for c in columns})


def _symlinks(identifier: str | None, catalog_name: str, catalog_uri: str | None) -> dict[str, Any]:
    if not identifier:
        return {}
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    return {"symlinks": SymlinksDatasetFacet(identifiers=[Identifier(
        namespace=catalog_namespace(catalog_name, catalog_uri), name=identifier, type="TABLE")])}


def _lineage(inputs: Iterable[Any] = (), outputs: Iterable[Any] = ()) -> Any:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=list(inputs), outputs=list(outputs))


def conversion_lineage(table_uri: str, *, identifier: str | None, catalog_name: str, catalog_uri: str | None,
                       delta_version: int | None = None, snapshot_id: int | None = None,
                       columns: Sequence[Column] | None = None) -> Any:
    """A conversion's lineage: the Delta table in, its Iceberg table out (versions and schema once it ran)."""
    from openlineage.client.generated.base import InputDataset, OutputDataset

    delta, iceberg = dataset_name(table_uri), iceberg_dataset_name(table_uri)
    output_facets = {**table_facets("iceberg", snapshot_id, columns),
                     **_symlinks(identifier, catalog_name, catalog_uri)}
    if columns:
        output_facets["columnLineage"] = _identity_lineage(delta, columns)
    return _lineage(
        inputs=[InputDataset(namespace=delta.namespace, name=delta.name,
                             facets=table_facets("delta", delta_version, columns))],
        outputs=[OutputDataset(namespace=iceberg.namespace, name=iceberg.name, facets=output_facets)],
    )


def _assertions(report: Mapping[str, Any]) -> Any:
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )

    violations: dict[str, list[Mapping[str, Any]]] = {}
    for violation in report.get("violations", ()):
        violations.setdefault(violation["rule_id"], []).append(violation)
    assertions = []
    for rule in report.get("rules_checked", ()):
        found = violations.get(rule, [])
        errors = [v for v in found if v["severity"] == "error"]
        column = next((v["location"]["path"] for v in found if v["location"]["kind"] == "column"), None)
        assertions.append(Assertion(
            assertion=rule, success=not errors, column=column,
            severity="error" if errors else ("warn" if found else None),
            description=found[0]["title"] if found else None,
            actual=str(len(found)) if found else None, expected="0" if found else None,
        ))
    return DataQualityAssertionsDatasetFacet(assertions=assertions)


def validation_lineage(table_uri: str, *, version: int | None = None, columns: Sequence[Column] | None = None,
                       report: Mapping[str, Any] | None = None) -> Any:
    """A validation's lineage: the Delta table in, with the report's rules as data-quality assertions."""
    from openlineage.client.generated.base import InputDataset

    delta = dataset_name(table_uri)
    input_facets = {"dataQualityAssertions": _assertions(report)} if report else {}
    return _lineage(inputs=[InputDataset(namespace=delta.namespace, name=delta.name,
                                         facets=table_facets("delta", version, columns),
                                         inputFacets=input_facets)])


def enable_lineage(table_uri: str, *, read_version: int | None = None, committed_version: int | None = None,
                   columns: Sequence[Column] | None = None) -> Any:
    """An enable's lineage: the Delta table in at the version planned on; out at the version committed, if any."""
    from openlineage.client.generated.base import InputDataset, OutputDataset

    delta = dataset_name(table_uri)
    outputs = [] if committed_version is None else [OutputDataset(
        namespace=delta.namespace, name=delta.name, facets=table_facets("delta", committed_version, columns))]
    return _lineage(inputs=[InputDataset(namespace=delta.namespace, name=delta.name,
                                         facets=table_facets("delta", read_version, columns))],
                    outputs=outputs)
