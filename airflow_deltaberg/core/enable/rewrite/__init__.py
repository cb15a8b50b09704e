"""The enable rewrite's data side, free of Spark: the physical layout, partition values, the file contract
between the driver and the executors, the file writer and its stats, the log actions and the result."""
