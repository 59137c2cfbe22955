"""Training checkpoints: save, load, the resume point and pruning, behind one front door."""
