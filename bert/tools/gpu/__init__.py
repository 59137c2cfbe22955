"""The GPU harness (scripts/bench/validate_gpu.sh): the window and stages (validate.py,
window.py), how they launch a step (launch.py), their report (report.py) and the steps they run
(probe_sdpa.py, smoke_train.py, pytest_without.py); learn.py, the settings under which their
training runs learn."""
