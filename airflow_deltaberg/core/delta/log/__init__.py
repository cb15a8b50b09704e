"""The Delta log: listing its files, reading commits and checkpoints, replaying them, writing commits."""
