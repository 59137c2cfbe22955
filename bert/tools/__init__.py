"""Command-line tools over the package: benchmarks (throughput/, kernel_bench/, bench_*.py),
simulations and experiments (simulate_balance.py, curriculum_experiment.py), checkpoint
conversion (convert_checkpoint.py) and the GPU harness (gpu/). scripts/ holds their command
lines; common.py the helpers they share."""
