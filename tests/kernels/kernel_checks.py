"""Shared by the kernel tests: sizes and the tolerance tied to PyTorch's own error."""

from __future__ import annotations

import torch

# Token counts: 1, primes, multiples of 512 (STYLE: odd sizes).
TOKEN_COUNTS = (1, 7, 509, 512, 2053, 4096)
LOW_PRECISION = (torch.float16, torch.bfloat16)


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def assert_within_torch_error(
    name: str,
    out: torch.Tensor,
    out_torch: torch.Tensor,
    ref: torch.Tensor,
    factor: float = 2.0,
    eps: float = 1e-5,
) -> None:
    """Kernel error vs the fp32 reference <= factor x PyTorch's low-precision error + eps.

    out: the kernel; out_torch: the unfused PyTorch composition in fp16/bf16; ref: fp32 oracle.
    eps is relative to the reference's magnitude (covers outputs PyTorch gets exactly right).
    """
    err, err_torch = max_error(out, ref), max_error(out_torch, ref)
    scale = max(1.0, ref.float().abs().max().item()) if ref.numel() else 1.0
    bound = factor * err_torch + eps * scale
    assert err <= bound, (
        f"{name}: kernel error {err:.3g} exceeds {factor} x PyTorch's "
        f"{err_torch:.3g} + {eps * scale:.1g}"
    )
