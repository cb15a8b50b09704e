"""The test run's fixtures are those of the support layer (tests/support/plugin.py): loading it also sets the
Airflow environment before Airflow is first imported."""

pytest_plugins = ["support.plugin"]
