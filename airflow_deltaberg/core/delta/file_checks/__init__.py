"""A data file checked against its add action and the Delta schema: footers, types, stats, values."""
