"""The core library: storage, the Delta log engine, compatibility rules, Iceberg conversion.

Nothing under this package imports Airflow.
"""
