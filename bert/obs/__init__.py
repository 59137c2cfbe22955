"""Seeing inside a run: what a run leaves beside its MLPerf log, and how it is watched live.

logs.py         the `logging` setup: one format (time, rank, level), rank 0 at info
ranges.py       named ranges (record_function / NVTX), live only while someone records
flops.py        useful FLOPs of a step and the device's peak rate (for MFU)
metrics.py      the metrics record at progress and eval points (host values only)
sinks.py        where the records go: metrics.jsonl, TensorBoard
run_record.py   run.json: resolved config with each key's source, versions, device, command
profiler.py     the profiler window: torch.profiler over chosen steps, a trace per rank
observer.py     the one object the trainer calls into
config.py       `profile.*` keys
metrics_plot.py reading metrics.jsonl for scripts/plot_run.py
bench_overhead.py  the step time with and without a profiler window configured
"""
