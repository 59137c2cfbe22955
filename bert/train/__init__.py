"""Training: the trainer (trainer.py) and the state it hands to checkpoints (train_state.py),
checkpoints and resume (checkpoint/), the launch environment and process group (launch_env.py,
distributed.py), progress lines (progress.py) and the run's own config sections (config.py).
The MLPerf logger is bert/mlperf/writer.py."""
