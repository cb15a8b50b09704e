"""The provider's Airflow plugin: the "Delta -> Iceberg" page in Airflow's UI (``ui``, registered through the
``airflow.plugins`` entry point), and what it gathers from Airflow's DB (``lake_data``)."""
