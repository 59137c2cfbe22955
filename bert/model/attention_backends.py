"""The table of attention backends `model.attention` chooses from, without torch.

    padded_sdpa    reference: pad only inside attention, masked SDPA, unpad; exact anywhere
    per_sequence   CPU: one sequence at a time, sum(l_i^2) work, nothing padded
    flash_varlen   CUDA fp16/bf16: PyTorch's flash varlen kernel on packed tokens
    grouped_flash  [Zeng]'s length groups, one launch per group, each on its own CUDA stream

A record names its functions (bert/model/attention.py) by dotted path, so the config,
`--help-config` and the planner read the names and GPU status without importing torch;
`resolve(name)` returns the record with its functions loaded, once, when the model is built.
Every backend's `attend(q, k, v, batch, dropout_p)` has the same signature (attention.Attend),
so the forward never branches on the name. A backend that needs metadata made on the host says
so (`attention_groups`): the data pipeline then builds it (data/packing.py), and only then.
Adding a backend is one function in attention.py and one `BACKENDS` entry here.

Each backend's GPU status is a field of its record (`gpu_validated`), read by the docs check and
the start-of-run warning (bert/gpu_status.py); kernels/VALIDATION.md lists the tests. Which one
a device should run is read from the GPU window's attention probe (`pick`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from bert.core.lazy import Ref, load


@dataclass(frozen=True)
class AttentionBackend:
    name: str
    attend: Ref  # attention.Attend, or where it is in attention.py (_fn)
    # The same for queries that are a subset of the tokens (model.last_layer_subset): q is
    # (Q, heads, head_dim) in PackedBatch.query_subset's order, k and v every token.
    attend_subset: Ref
    attention_groups: bool = False  # reads PackedBatch.groups, which the host must build
    # GPU status, the one place it is written: the reference needs none (PyTorch's own SDPA);
    # otherwise the record (benchmarks/results/gpu/...) of the window whose tests passed, or
    # None: not validated on a GPU yet, so no config turns it on (bert/gpu_status.py warns)
    reference: bool = False
    gpu_validated: str | None = None


def _fn(name: str) -> str:
    """A function of bert/model/attention.py, by dotted path."""
    return f"bert.model.attention:{name}"


# H100, torch 2.11: tests/unit/test_attention.py::test_cuda_backend_on_gpu passed for both
# (fp16, bf16)
WINDOW_2026_11_26 = "benchmarks/results/gpu/2026-11-26_window"
BACKENDS: dict[str, AttentionBackend] = {
    b.name: b
    for b in (
        AttentionBackend(
            "padded_sdpa", _fn("_padded_sdpa"), _fn("_padded_sdpa_subset"), reference=True
        ),
        AttentionBackend(
            "per_sequence", _fn("_per_sequence"), _fn("_per_sequence_subset"), reference=True
        ),
        AttentionBackend(
            "flash_varlen",
            _fn("_flash_varlen"),
            _fn("_flash_varlen_subset"),
            gpu_validated=WINDOW_2026_11_26,
        ),
        AttentionBackend(
            "grouped_flash",
            _fn("grouped_attention"),
            _fn("_grouped_subset"),
            attention_groups=True,
            gpu_validated=WINDOW_2026_11_26,
        ),
    )
}


def resolve(name: str) -> AttentionBackend:
    """The backend `model.attention` names, its functions loaded (this imports torch);
    ValueError listing the choices otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; expected one of {tuple(BACKENDS)}")
    backend = BACKENDS[name]
    return dataclasses.replace(
        backend, attend=load(backend.attend), attend_subset=load(backend.attend_subset)
    )


def pick(records: Iterable[dict], device: str, default: str | None, dtype: str = "bf16"):
    """The backend `model.attention` should name on `device`, from the attention probe's
    records (bert/tools/gpu/probe_attention.py): in the newest record of that device (by its
    date; the device name as PyTorch reports it), the fastest training step (`train_ms`:
    forward and backward at the model's attention dropout) among the cases in `dtype` that
    are a backend, whose check against the fp64 yardstick passed, and that a config may name
    (a reference backend, or one a GPU window validated: a faster path without its tests is
    not picked). `default` when no record of the device has one: without a probe nothing
    changes."""
    mine = [r for r in records if r.get("device") == device and r.get("cases")]
    if not mine:
        return default
    newest = max(mine, key=lambda r: r.get("date", ""))
    times = {}
    for case in newest["cases"]:
        backend = BACKENDS.get(case.get("backend") or "")
        if (
            backend is not None
            and case.get("dtype") == dtype
            and (backend.reference or backend.gpu_validated)
            and case.get("check", {}).get("passed")
            and case.get("train_ms") is not None
        ):
            times[backend.name] = case["train_ms"]
    return min(times, key=times.get) if times else default
