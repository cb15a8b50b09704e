"""airflow-deltaberg: an Apache Airflow provider that keeps Delta Lake tables readable as Iceberg tables."""

from airflow_deltaberg.version import __version__

__all__ = ["__version__"]
