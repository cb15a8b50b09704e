"""OpenLineage for the operators: the dataset naming rule (``naming``, standard library only) and the facets of
each operator's run (``facets``), which import the OpenLineage client only when Airflow's OpenLineage provider asks
for them (the ``openlineage`` extra); without it nothing here is imported."""
