"""The functions the model's layers call, by name, and how the model picks them.

Every computation a fused kernel may replace is a named layer function with a plain-PyTorch
reference here (`REFERENCE`). A fused op (bert/model/fused.py's `FUSED_OPS`) names the layer
functions it replaces; the model picks its functions once, when it is built
(`pick_layer_functions`), and hands them to every layer, so its forward has no branches on
flags and a new fused op that replaces an existing layer function touches no layer.

A layer function may be built from others: a keyword-only parameter named after an earlier
layer function is bound to the one picked for it (the sublayer output takes the `linear` it
runs; the feed-forward block takes its first GEMM and its sublayer output). So fused_dense,
which replaces `linear`, also reaches the sublayers that call it, without knowing them.
"""

from __future__ import annotations

import functools
import inspect
from types import MappingProxyType, SimpleNamespace
from typing import Callable, Iterable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

Linear = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]
# LayerNorm(residual + dropout(y + bias)): (y (T, hidden) without its bias, bias, dropout,
# layer_norm, residual) -> (T, hidden).
SublayerEnd = Callable[
    [torch.Tensor, torch.Tensor, nn.Dropout, nn.LayerNorm, torch.Tensor], torch.Tensor
]


def word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    """Word-embedding lookup: (input_ids (T,), table) -> (T, hidden)."""
    return table(input_ids)


def mlm_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """MLM loss: (logits (M, padded_vocab), labels (M,) int64, vocab_size) -> mean over the M
    rows. The vocabulary padding columns are dropped so they never enter the softmax."""
    return F.cross_entropy(logits[:, :vocab_size].float(), labels)


def linear_with_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A block's first dense layer, whose input is also the block's residual:
    (x (T, in), weight (out, in), bias (out,)) -> (F.linear(x, weight, bias), x).
    The block adds the returned residual, not x, at its end: with fused_dense that residual's
    gradient joins this layer's data-gradient GEMM instead of a separate add."""
    return F.linear(x, weight, bias), x


def linear_gelu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    approximate: str,
    *,
    linear: Linear = F.linear,
) -> torch.Tensor:
    """gelu(linear(x, weight, bias)): (x (T, in), weight (out, in), bias (out,), approximate)
    -> (T, out)."""
    return F.gelu(linear(x, weight, bias), approximate=approximate)


def add_and_norm(y, dropout, layer_norm, residual):
    """LayerNorm(residual + dropout(y)), y (T, hidden) with its bias. The add is in the
    LayerNorm's dtype: a no-op cast for the reference, whose residual is a LayerNorm output;
    with fused_dense under autocast the residual is the GEMM's 16-bit input, and the sum stays
    fp32 as in the reference instead of being rounded to 16 bits first."""
    return layer_norm(residual.to(layer_norm.weight.dtype) + dropout(y))


def sublayer_output(
    h,
    dense,
    dropout,
    layer_norm,
    residual,
    *,
    linear: Linear = F.linear,
    sublayer_end: Optional[SublayerEnd] = None,
):
    """The end of a post-LN sublayer, LayerNorm(residual + dropout(dense(h))):
    (h (T, in), dense, dropout, layer_norm, residual (T, hidden)) -> (T, hidden)."""
    y = linear(h, dense.weight, gemm_bias(dense.bias, sublayer_end))
    return end_sublayer(y, dense.bias, dropout, layer_norm, residual, sublayer_end)


def gemm_bias(bias: torch.Tensor, sublayer_end: Optional[SublayerEnd]) -> Optional[torch.Tensor]:
    """The bias a sublayer's last GEMM adds: all of it, unless sublayer_end adds it instead."""
    return bias if sublayer_end is None else None


def end_sublayer(y, bias, dropout, layer_norm, residual, sublayer_end: Optional[SublayerEnd]):
    """LayerNorm(residual + dropout(y + bias)) after the GEMM that made y with gemm_bias():
    sublayer_end None, the bias is in y and add_and_norm ends it; else sublayer_end adds the
    bias with the rest (model.fused_bias_dropout_residual_layernorm: one kernel)."""
    if sublayer_end is None:
        return add_and_norm(y, dropout, layer_norm, residual)
    return sublayer_end(y, bias, dropout, layer_norm, residual)


def feed_forward(
    x,
    intermediate,
    output,
    dropout,
    layer_norm,
    approximate,
    *,
    linear_with_residual: Callable = linear_with_residual,
    sublayer_output: Callable = sublayer_output,
):
    """A post-LN feed-forward sublayer, LayerNorm(x + dropout(output(gelu(intermediate(x))))):
    (x (T, hidden), intermediate, output, dropout, layer_norm, approximate) -> (T, hidden)."""
    pre, residual = linear_with_residual(x, intermediate.weight, intermediate.bias)
    return sublayer_output(
        F.gelu(pre, approximate=approximate), output, dropout, layer_norm, residual
    )


# The layer functions and their references, in an order where each comes after the layer
# functions it is built from. None: a part with nothing to run by default.
REFERENCE: Mapping[str, Optional[Callable]] = MappingProxyType(
    {
        "word_embedding": word_embedding,
        "mlm_cross_entropy": mlm_cross_entropy,
        "linear": F.linear,
        "linear_with_residual": linear_with_residual,
        "sublayer_end": None,
        "linear_gelu": linear_gelu,
        "sublayer_output": sublayer_output,
        "feed_forward": feed_forward,
    }
)
# What model.compile_sublayers puts under torch.compile (the attention-output and FFN
# sublayers); a fused op replacing one of these or one of their parts competes with it.
COMPILED = ("sublayer_output", "feed_forward")


def parts(fn: Optional[Callable]) -> dict[str, object]:
    """The layer functions `fn` is built from (its keyword-only parameters named after one),
    each with the default `fn` has for it."""
    if fn is None:
        return {}
    try:
        params = inspect.signature(fn).parameters.values()
    except ValueError:  # a builtin such as F.linear: built from nothing
        return {}
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.name in REFERENCE}


class LayerFunctions(SimpleNamespace):
    """The picked layer functions, one attribute each, picked once per model and handed to
    every layer; `_chosen`, the replacements they were picked with, lets a block with functions
    of its own (model.fp8_linear's GEMMs, which hold per-block state) re-bind over them
    (`with_own`) without reading the records again."""

    def with_own(self, own: Mapping[str, Callable]) -> "LayerFunctions":
        return pick_layer_functions({**self._chosen, **own}) if own else self


def pick_layer_functions(replacements: Mapping[str, Callable]) -> LayerFunctions:
    """The reference layer functions with `replacements` swapped in, each bound to the picked
    functions it is built from (a partial only where a part differs from its default)."""
    unknown = set(replacements) - set(REFERENCE)
    if unknown:
        raise KeyError(f"no layer function named {sorted(unknown)} (known: {list(REFERENCE)})")
    picked: dict[str, Optional[Callable]] = {}
    for name, reference in REFERENCE.items():
        fn = replacements.get(name, reference)
        picked[name] = _bind_parts(name, fn, picked)
    functions = LayerFunctions(**picked)
    functions._chosen = dict(replacements)
    return functions


def _bind_parts(name: str, fn: Optional[Callable], picked: dict) -> Optional[Callable]:
    bound = {}
    for part, default in parts(fn).items():
        if part not in picked:
            raise ValueError(f"layer function {name!r} is built from {part!r}, listed after it")
        if picked[part] is not default:
            bound[part] = picked[part]
    return functools.partial(fn, **bound) if bound else fn


def depends_on(names: Iterable[str]) -> set[str]:
    """`names` and every reference layer function they are built from, transitively."""
    found: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(parts(REFERENCE[name]))
    return found


def compiled_impl(
    fn: Callable[..., torch.Tensor], compile_sublayers: bool
) -> Callable[..., torch.Tensor]:
    """model.compile_sublayers: `fn` under torch.compile, the competitor to the hand-written
    fusions. dynamic=True keeps the token count symbolic, so one graph serves every batch; the
    modules are arguments, not constants, so one graph also serves every layer (measured on
    CPU: 1 graph for 12 layers x 3 token counts; tests/unit/test_compile_sublayers.py)."""
    return torch.compile(fn, dynamic=True) if compile_sublayers else fn
