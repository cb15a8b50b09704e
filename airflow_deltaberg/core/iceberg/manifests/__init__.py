"""Iceberg manifests and manifest lists: their schema, writing, merging, spilling, reading back."""
