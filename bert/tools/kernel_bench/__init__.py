"""Microbenchmarks of each fused kernel in kernels/ against the PyTorch composition it
replaces (scripts/bench/bench_<op>.py runs <op>.py)."""
