"""Plan a run before renting the cluster (`python -m bert.plan`, docs/plan.md): RCP-checked
hyperparameters for each global batch (rcp.py), memory per GPU (memory.py, activations.py),
step time and time to train (flops.py, timing.py) for a GPU kind (gpus.py)."""
