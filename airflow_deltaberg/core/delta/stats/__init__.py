"""Per-file Delta statistics: their Arrow type and the decoders of their JSON."""
