"""Delta deletion vectors as Iceberg deletes: v2 position delete files and v3 deletion vectors."""
