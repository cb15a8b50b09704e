"""Iceberg metadata: schema conversion, manifests and manifest lists."""
