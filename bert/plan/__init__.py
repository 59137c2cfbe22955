"""Plan a run before renting the cluster (`open-bert-plan`, docs/plan.md): RCP-checked
hyperparameters for each global batch (bert/mlperf/rcp.py), memory per GPU (memory.py,
activations.py), step time and time to train (bert/model/flops.py, timing.py, scale.py) for a
GPU kind (bert/core/gpus.py)."""
