"""CUDA graphs over bucketed batch shapes (run.cuda_graphs; docs/cuda_graphs.md).

shapes.py        which static shape a batch pads to (a pure function of host ints)
static_batch.py  one shape's input buffers, and a batch copied in with neutral padding
backends.py      capture and replay: CUDA graphs, or the eager emulation of the CPU tests
cache.py         shape -> captured runner; an unseen or unbucketed batch runs eagerly
build.py         the trainer's cache: its buckets, its step, what a capture needs
config.py        the checks of run.cuda_graphs when the config loads
"""
