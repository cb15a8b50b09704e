"""PySpark applications started through SparkSubmit. They call core/; importing this package needs no pyspark."""

from __future__ import annotations

from pathlib import Path

#: The application file of the IcebergWriterCompatV1 data rewrite (the ``application`` of a SparkSubmit).
ENABLE_REWRITE_APP = str(Path(__file__).with_name("enable_rewrite.py"))
