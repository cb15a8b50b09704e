"""Delta deletion vectors: descriptors, their Z85 ids and the RoaringBitmapArray they hold."""
