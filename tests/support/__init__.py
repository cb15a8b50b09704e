"""The tests' support layer: the Airflow environment and metadata DB, DAG runs, the one Spark session, free
ports and loopback servers, the CLI runner, and Delta table builders. ``support.plugin`` registers the fixtures
(loaded by tests/conftest.py through ``pytest_plugins``); the other modules are plain helpers to import."""
