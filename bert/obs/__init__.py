"""Seeing inside a run: what a run leaves beside its MLPerf log, and how it is watched live.

logs.py         the `logging` setup: one format (time, rank, level), rank 0 at info
mfu.py          the square sums of each batch's lengths and the device's peak rate (for MFU;
                the FLOP count itself is bert/model/flops.py)
metrics.py      the metrics record at progress and eval points (host values only)
sinks.py        where the records go: metrics.jsonl, TensorBoard
run_record.py   run.json: resolved config with each key's source, versions, device, command
profiler.py     the profiler window: torch.profiler over chosen steps, a trace per rank
observer.py     the one object the trainer calls into
config.py       `profile.*` keys
The step-phase ranges are bert/core/ranges.py (the sharded optimizer marks them too); reading
metrics.jsonl for plots is bert/submission/metrics_plot.py.
"""
