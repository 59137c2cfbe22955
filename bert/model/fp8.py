"""model.fp8_linear: the encoder's four GEMMs per layer (QKV, attention output, both FFN GEMMs)
in FP8 through torch._scaled_mm; the embeddings, the MLM head, the pooler and NSP stay as they
are (NVIDIA's MLPerf recipe). docs/fp8.md has the recipe and what is validated.

Forward: x and W rounded to e4m3 with per-tensor scales, one GEMM with the bias, the output in
the activations' dtype (bf16/fp16 under autocast). Backward: the output gradient rounded to
e5m2 (its range matters more than its precision), the data and weight gradients as FP8 GEMMs,
the bias gradient summed from the unrounded gradient. A scale maps a tensor's amax onto the
format's largest value: from this tensor (current scaling) or from an amax history kept on the
device (delayed scaling, the default); either way no value is read on the host.

Everything but the GEMM itself is the same code on every device. torch 2.13 has a CPU
torch._scaled_mm, but a naive one (0.4 s for a 512x64x192 GEMM, 25x an fp32 matmul of the same
FP8 values), so on the CPU `scaled_mm` multiplies the FP8 values in fp32 and scales the result:
the same math up to the summation order (tests/unit/test_fp8.py checks the two agree, and
holds both to an oracle that casts to float8 and back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

import torch
from torch import nn

from bert.model.fused import gemm_features
from bert.model.fused_functions import require_low_precision_gemm_on_cuda

if TYPE_CHECKING:
    from bert.model.config import ModelConfig

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# torch._scaled_mm on CUDA: both dims of its second operand and the first's inner dim.
GEMM_MULTIPLE = 16
# The layer functions model.fp8_linear swaps in the encoder (not in the heads).
REPLACES = ("linear", "linear_with_residual")
# Rows of a GEMM's amax history: its input, its weight, its output gradient.
X, W, GRAD = 0, 1, 2
# The GPU window record whose tests passed for model.fp8_linear; None: not validated yet.
FP8_LINEAR_GPU_VALIDATED: Optional[str] = None


@dataclass(frozen=True)
class Recipe:
    scaling: Literal["delayed", "current"] = "delayed"
    forward: torch.dtype = E4M3  # x and W
    grad: torch.dtype = E5M2  # the output gradient
    history: int = 16  # amaxes kept per tensor for delayed scaling
    margin: int = 0  # scale = max / amax / 2**margin: headroom for growth between steps


# ---- quantization --------------------------------------------------------------------------
def scale_for(amax: torch.Tensor, dtype: torch.dtype, margin: int = 0) -> torch.Tensor:
    """The factor that maps `amax` onto `dtype`'s largest finite value (1 where amax is 0 or
    not finite), kept finite in fp32 so a tiny amax cannot make it inf."""
    top = torch.finfo(dtype).max / 2.0**margin
    usable = (amax > 0) & amax.isfinite()
    scale = torch.where(usable, top / amax.float().clamp(min=1e-30), 1.0)
    return scale.clamp(max=torch.finfo(torch.float32).max)


def quantize(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t * scale rounded to `dtype`; values beyond its largest finite one are clamped there
    (e4m3fn has no inf; e5m2 would overflow to inf). The product is in fp32: rounding it to
    bf16 first would round twice."""
    top = torch.finfo(dtype).max
    return (t.float() * scale).clamp_(-top, top).to(dtype)


def dequant_factor(scale: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """What _scaled_mm multiplies the GEMM by for this operand: 1/scale, or NaN when the
    operand holds inf or NaN, which the clamp would hide (an fp16 overflow must reach the
    loss scaler)."""
    return torch.where(amax.isfinite(), scale.reciprocal(), float("nan"))


def amax_of(t: torch.Tensor) -> torch.Tensor:
    return t.detach().abs().amax().float()


def pick_scale(history: torch.Tensor, role: int, amax: torch.Tensor, recipe: Recipe, record: bool):
    """This call's scale for `role`, and its amax pushed into the history when `record`.

    Delayed: from the largest amax in the history (before this one); the current amax only
    while the history is empty (the first call). Current: from this tensor's amax."""
    row = history[role]
    used = amax
    if recipe.scaling == "delayed":
        past = row.max()
        used = torch.where(past > 0, past, amax)
    if record:  # a non-finite amax (an overflowing step) must not poison later scales
        row.copy_(row.roll(1))
        row[0] = torch.where(amax.isfinite(), amax, 0.0)
    return scale_for(used, recipe.forward if role != GRAD else recipe.grad, recipe.margin)


def cast(t, history, role, recipe, record):
    """(t in FP8, its dequantization factor) for the GEMM role `role` (X, W or GRAD)."""
    amax = amax_of(t)
    scale = pick_scale(history, role, amax, recipe, record)
    dtype = recipe.grad if role == GRAD else recipe.forward
    return quantize(t, scale, dtype), dequant_factor(scale, amax)


# ---- layouts -------------------------------------------------------------------------------
def column_major(t8: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column-major (_scaled_mm's second operand); FP8 has no strided
    GEMM, so this is a copy."""
    return t8.t().contiguous().t()


def transposed_padded(t8: torch.Tensor) -> torch.Tensor:
    """(T, n) FP8 -> (n, T') row-major, T' = T rounded up to GEMM_MULTIPLE with zero columns:
    the weight gradient's inner dimension is the token count, which _scaled_mm needs a multiple
    of 16. Zeros add nothing to the sum; the shape is known on the host, so no sync."""
    tokens, n = t8.shape
    padded = -(-tokens // GEMM_MULTIPLE) * GEMM_MULTIPLE
    out = torch.zeros((n, padded), dtype=t8.dtype, device=t8.device)
    out[:, :tokens] = t8.t()
    return out


# ---- the GEMM -------------------------------------------------------------------------------
def scaled_mm(a8, b8, a_factor, b_factor, out_dtype, bias=None):
    """(a8 @ b8) * a_factor * b_factor (+ bias) in out_dtype: torch._scaled_mm on CUDA (a8
    row-major, b8 column-major), its fp32 emulation elsewhere (see the module's docstring)."""
    if a8.is_cuda:
        return torch._scaled_mm(a8, b8, a_factor, b_factor, bias=bias, out_dtype=out_dtype)
    y = torch.mm(a8.float(), b8.float()).mul_(a_factor * b_factor)
    return (y if bias is None else y.add_(bias)).to(out_dtype)


# ---- the autograd node ---------------------------------------------------------------------
class Fp8LinearFunction(torch.autograd.Function):
    """F.linear with FP8 operands: (x (T, in), weight (out, in), bias (out,) or None) ->
    (T, out) in out_dtype. in and out must be multiples of 16 (ModelConfig checks them)."""

    @staticmethod
    def forward(ctx, x, weight, bias, history, recipe, out_dtype, record):
        x8, x_factor = cast(x, history, X, recipe, record)
        w8, w_factor = cast(weight, history, W, recipe, record)
        out_bias = None if bias is None else bias.to(out_dtype)
        y = scaled_mm(x8, w8.t(), x_factor, w_factor, out_dtype, out_bias)
        ctx.save_for_backward(x8, w8, x_factor, w_factor)
        # not saved for backward: the next call's record changes it in place (the last
        # layer's query subset runs the QKV function twice), which autograd would refuse
        ctx.history, ctx.recipe, ctx.record = history, recipe, record
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, grad):
        x8, w8, x_factor, w_factor = ctx.saved_tensors
        x_dtype, w_dtype, bias_dtype = ctx.dtypes
        g8, g_factor = cast(grad.contiguous(), ctx.history, GRAD, ctx.recipe, ctx.record)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:  # (T, out) @ (out, in)
            dx = scaled_mm(g8, column_major(w8), g_factor, w_factor, x_dtype)
        if ctx.needs_input_grad[1]:  # (out, T) @ (T, in)
            a, b = transposed_padded(g8), transposed_padded(x8).t()
            dw = scaled_mm(a, b, g_factor, x_factor, w_dtype)
        if bias_dtype is not None and ctx.needs_input_grad[2]:
            db = grad.sum(0, dtype=torch.float32).to(bias_dtype)
        return dx, dw, db, None, None, None, None


def output_dtype(x: torch.Tensor) -> torch.dtype:
    """F.linear's output dtype: autocast's when it is on for x's device, else x's."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


class Fp8Linear(nn.Module):
    """One encoder GEMM's layer function, F.linear's signature, with its own amax history
    (a buffer, so .to(device) moves it; not persistent, so checkpoints are the same with the
    flag on or off). Eval forwards use the history without adding to it."""

    def __init__(self, recipe: Recipe):
        super().__init__()
        self.recipe = recipe
        self.register_buffer("amax_history", torch.zeros(3, recipe.history), persistent=False)

    def forward(self, x, weight, bias=None):
        require_low_precision_gemm_on_cuda("fp8_linear", x)
        return Fp8LinearFunction.apply(
            x, weight, bias, self.amax_history, self.recipe, output_dtype(x), self.training
        )

    def with_residual(self, x, weight, bias):
        """layer_functions.linear_with_residual's signature: (linear(x, weight, bias), x)."""
        return self(x, weight, bias), x


# ---- the model's side ----------------------------------------------------------------------
def encoder_gemms(block: nn.Module, cfg: "ModelConfig") -> dict[str, nn.Module]:
    """An encoder block's FP8 layer functions (empty with model.fp8_linear off), registered on
    `block` as `fp8_first` (QKV or FFN intermediate: the block's input GEMM, whose input is the
    residual) and `fp8_last` (attention output or FFN output), each with its own scales."""
    if not cfg.fp8_linear:
        return {}
    recipe = Recipe(scaling=cfg.fp8_scaling)
    block.fp8_first, block.fp8_last = Fp8Linear(recipe), Fp8Linear(recipe)
    return {"linear_with_residual": block.fp8_first.with_residual, "linear": block.fp8_last}


def config_problem(cfg: "ModelConfig") -> Optional[str]:
    """What model.fp8_linear needs that `cfg` lacks, as "<what> ..., got <value>"."""
    return gemm_features(cfg, GEMM_MULTIPLE, "torch._scaled_mm's FP8 GEMM features")


def require_device(cfg: "ModelConfig", device: torch.device | str) -> None:
    """On CUDA, FP8 GEMMs need compute capability 8.9 or newer (Ada, Hopper): fail when the
    model is built, not at the first step."""
    device = torch.device(device)
    if not cfg.fp8_linear or device.type != "cuda":
        return
    capability = torch.cuda.get_device_capability(device)
    if capability < (8, 9):
        raise RuntimeError(
            f"model.fp8_linear=true needs a GPU of compute capability 8.9 or newer (Ada, "
            f"Hopper) for FP8 GEMMs, got {capability[0]}.{capability[1]} on {device}"
        )
