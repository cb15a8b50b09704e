"""Avro for Iceberg: the object container file (writer and reader) and the column encoders."""
