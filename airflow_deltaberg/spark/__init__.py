"""PySpark applications started through SparkSubmit. They call core/; importing this package needs no pyspark."""
