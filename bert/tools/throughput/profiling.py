"""Where one training step's time goes: torch.profiler, grouped by op and kernel names.

On the CPU each op's self time is attributed to a category by its name; whatever the step's
wall time has beyond the ops' summed self times is host overhead (Python, dispatch, waits).
On CUDA the device kernels are grouped the same way and `idle` is the part of the step's wall
time during which no kernel ran. Grouping is by name only, so it has blind spots, stated here:
- `bmm`/`baddbmm` count as attention: in both models they only arise in attention (linear layers
  run as mm/addmm), and the per-sequence CPU attention is built from them.
- dropout's random numbers (bernoulli, uniform_ from rand_like) are their own category.
- ops run inside the optimizer's record_function range count as optimizer on the CPU; on CUDA
  kernels are matched by name (foreach / multi_tensor) instead.
- on CUDA only kernels count: the profiler mirrors record_function ranges (the optimizer's step,
  every custom op) onto the GPU timeline as user annotations spanning their kernels; counting
  them too made the 2026-11-26 H100 profile add up to 173 ms of a 133 ms step.
"""

from __future__ import annotations

import re
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bert.tools.throughput.measure import synchronize

# First match wins; patterns are matched against the op or kernel name, lower-cased.
CATEGORIES = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|c10d|gloo|broadcast"),
    ("optimizer", r"_foreach|multi_tensor|lamb(?!da)"),  # not the kernels' {lambda()#n}
    ("dropout_rng", r"bernoulli|native_dropout|philox|::rand|randint|uniform_"),
    ("loss", r"log_softmax|nll_loss|cross_entropy"),
    ("attention", r"flash|fmha|attention|softmax|::bmm|::baddbmm"),
    ("gemm", r"::mm$|::addmm|gemm|cutlass|xmma|cublas|nvjet|::linear$|::matmul$"),
    ("norm", r"layer_?norm"),
    ("embedding_index", r"embedding|index|gather|scatter|::cat$|::split|::stack"),
)
_COMPILED = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
_PHASE_PREFIX = "bench::"


def categorize(name: str) -> str:
    lowered = name.lower()
    for category, pattern in _COMPILED:
        if pattern.search(lowered):
            return category
    return "elementwise_other"


def _phase(event) -> str | None:
    """The bench:: record_function range (forward/backward/optimizer) an op ran in, if any."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(_PHASE_PREFIX):
            return parent.name.removeprefix(_PHASE_PREFIX)
        parent = parent.cpu_parent
    return None


def _cpu_breakdown(events) -> dict[str, float]:
    """Self CPU microseconds per category over every op (phase labels count as overhead)."""
    totals: dict[str, float] = {}
    for event in events:
        if event.device_type != DeviceType.CPU:
            continue
        if event.name.startswith(_PHASE_PREFIX) or event.name.startswith("autograd::"):
            category = "host_overhead"
        elif _phase(event) == "optimizer":
            category = "optimizer"
        else:
            category = categorize(event.name)
        totals[category] = totals.get(category, 0.0) + event.self_cpu_time_total
    return totals


def _is_kernel(event) -> bool:
    """A device event that is a kernel (or memcpy/memset), not a user annotation's span."""
    return event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)


def _cuda_breakdown(events) -> tuple[dict[str, float], float]:
    """Kernel microseconds per category and the busy time (union of kernel intervals)."""
    totals: dict[str, float] = {}
    intervals = []
    for event in events:
        if not _is_kernel(event):
            continue
        duration = event.time_range.end - event.time_range.start
        category = categorize(event.name)
        totals[category] = totals.get(category, 0.0) + duration
        intervals.append((event.time_range.start, event.time_range.end))
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return totals, busy


def _top_ops(prof, device: torch.device, limit: int = 15) -> list[list]:
    """The ops (CPU) or kernels (CUDA) with the most self time: [name, ms, category]."""
    rows = []
    for avg in prof.key_averages():
        if device.type == "cuda" and not _is_kernel(avg):
            continue  # a CPU op's device time is its kernels', already rows of their own
        us = avg.self_device_time_total if device.type == "cuda" else avg.self_cpu_time_total
        if us > 0 and not avg.key.startswith(_PHASE_PREFIX):
            rows.append([avg.key, round(us / 1e3, 3), categorize(avg.key)])
    rows.sort(key=lambda row: -row[1])
    return rows[:limit]


def profile_step(step, index: int, device: torch.device) -> dict:
    """Profile one call of step(index) (the caller has warmed it up); returns the breakdown."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step(index)
        synchronize(device)
        wall_us = (time.perf_counter() - start) * 1e6
    events = prof.events()
    if device.type == "cuda":
        totals, busy = _cuda_breakdown(events)
        totals["idle"] = max(0.0, wall_us - busy)
        basis = "device kernel time per category; idle = wall time with no kernel running"
    else:
        totals = _cpu_breakdown(events)
        totals["host_overhead"] = totals.get("host_overhead", 0.0) + max(
            0.0, wall_us - sum(totals.values())
        )
        basis = (
            "self CPU time of ops per category; host_overhead = phase/autograd wrappers "
            "plus wall time not inside any op"
        )
    total = sum(totals.values()) or 1.0
    return {
        "wall_ms": round(wall_us / 1e3, 3),
        "ms": {k: round(v / 1e3, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "share": {k: round(v / total, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "top_ops": _top_ops(prof, device),
        "basis": basis,
        "categories": {name: pattern for name, pattern in CATEGORIES},
    }
