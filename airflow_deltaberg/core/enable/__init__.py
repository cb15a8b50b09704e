"""Enabling IcebergWriterCompatV1: the plan (plan), the entry point that picks the path (run), the commits it
writes (commit), creating a table with it on from version 0 (create), the target schema (schema), and the data
rewrite's Spark-free side (rewrite/). The Spark application that runs the rewrite is airflow_deltaberg.spark."""
