"""GPU status is a field of each registry record (bert/gpu_status.py), not prose: the warning a
CUDA run prints and kernels/VALIDATION.md's tables both follow the records."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bert import gpu_status
from bert.config import load_config
from bert.model import fused
from bert.model.attention import BACKENDS
from bert.optim.registry import OPTIMIZERS

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = (ROOT / "kernels" / "VALIDATION.md").read_text()


def test_the_default_config_turns_on_nothing_unvalidated():
    assert gpu_status.unvalidated(load_config(None)) == []
    assert gpu_status.warning(load_config(None)) is None


def test_every_unvalidated_switch_is_named(monkeypatch):
    # records as before any window validated them (the 2026-11-28 windows did: H200)
    for flag in ("fused_mlm_loss", "fused_dense"):
        op = fused.FUSED_OPS[flag]
        monkeypatch.setitem(fused.FUSED_OPS, flag, dataclasses.replace(op, gpu_validated=None))
    lamb = OPTIMIZERS["lamb"]
    unvalidated_math = dataclasses.replace(lamb.sharded, fused_gpu_validated=None)
    monkeypatch.setitem(OPTIMIZERS, "lamb", dataclasses.replace(lamb, sharded=unvalidated_math))
    cfg = load_config(
        None,
        [
            "model.attention=grouped_flash",
            "model.fused_mlm_loss=true",
            "model.fused_dense=true",
            "optim.sharded=true",
            "optim.fused_kernel=true",
        ],
    )
    # grouped_flash passed its GPU tests in the 2026-11-26 H100 window: not named any more
    assert gpu_status.unvalidated(cfg) == [
        "model.fused_mlm_loss",
        "model.fused_dense",
        "optim.fused_kernel",
    ]
    assert gpu_status.warning(cfg).startswith("warning: not validated on a GPU yet: ")


def test_a_validated_record_is_not_named(monkeypatch):
    op = fused.FUSED_OPS["fused_mlm_loss"]
    monkeypatch.setitem(
        fused.FUSED_OPS,
        "fused_mlm_loss",
        dataclasses.replace(op, gpu_validated="benchmarks/results/gpu/x"),
    )
    cfg = load_config(None, ["model.fused_mlm_loss=true"])
    assert gpu_status.unvalidated(cfg) == []


def _row(key: str) -> str:
    """The key's row in the GPU-validated table, generated after the hand-written one
    (bert/tools/gpu/verdicts.py)."""
    rows = [line for line in VALIDATION.splitlines() if line.startswith(f"| `{key}` |")]
    assert rows, f"kernels/VALIDATION.md has no table row for {key}"
    return rows[-1]


def test_validation_doc_agrees_with_the_records():
    """A record without a GPU record reads **no** in the doc's GPU-validated column."""
    for flag, op in fused.FUSED_OPS.items():
        cell = _row(f"model.{flag}").rstrip(" |").rsplit("|", 1)[-1]
        assert ("**no**" in cell) == (op.gpu_validated is None), flag
    for name, backend in BACKENDS.items():
        if not backend.reference:
            cell = _row(f"model.attention={name}").rstrip(" |").rsplit("|", 1)[-1]
            assert ("**no**" in cell) == (backend.gpu_validated is None), name
    assert re.search(r"\| `model.compile_sublayers` .*\*\*no\*\*", VALIDATION)
