"""Training: the trainer (trainer.py), resume from checkpoints (resume.py), the launch
environment and process group (launch_env.py, distributed.py), progress lines (progress.py) and
the run's own config sections (config.py). The MLPerf logger is bert/mlperf/writer.py."""
