"""The scheduler's pure core: the step function, its model and its snapshots (no I/O)."""
