"""What the model saves for backward, counted by running it (not by a formula).

`count_saved` runs this program's own model (bert/model/modeling.py, built from a ModelConfig)
forward on one batch under `torch.autograd.graph.saved_tensors_hooks` and adds up the bytes of
every distinct storage autograd keeps for backward (views of one storage count once). That is
the activation memory of one micro-batch: what stays allocated from the end of the forward until
backward frees it.

On the meta device (the planner's case) nothing is computed, so BERT-Large at any batch costs a
fraction of a second, but two things a GPU does must be reproduced, and `CudaLikeRun` does:
- autocast's dtype choices, as CUDA's autocast makes them (the meta device has no autocast):
  matrix products and attention in 16 bits, LayerNorm, softmax and the losses in fp32, every
  other op in its inputs' dtype; each fp32 weight cast to 16 bits once per forward and kept
  (autocast's weight cache), which the count reports apart, as the 16-bit model copy;
- the attention kernel: CUDA runs masked SDPA with dropout through a fused kernel (memory-
  efficient or cuDNN attention) that saves q, k, v, the output and the softmax statistics, not
  the l x l probabilities the CPU's math path keeps. The count calls that kernel's aten op
  (`_scaled_dot_product_efficient_attention`) on the meta device, so autograd records exactly
  what it saves.
On the CPU (the tests) the model runs for real and nothing is emulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from bert.model.config import ModelConfig
from bert.model.modeling import BertForPretraining
from bert.model.flops import masked_count
from data.order.lengths import length_pmf
from data.packing import Sample, pack_samples

LOW_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}
# CUDA autocast's lists, for the ops this model calls
AUTOCAST_16BIT = (
    F.linear,
    torch.matmul,
    torch.mm,
    torch.addmm,
    torch.bmm,
    torch.baddbmm,
    F.scaled_dot_product_attention,
)
AUTOCAST_FP32 = (F.layer_norm, F.softmax, F.log_softmax, F.cross_entropy, F.nll_loss)


@dataclass(frozen=True)
class SavedBytes:
    activations: int  # bytes saved for backward, weight casts excluded
    weight_copies: int  # 16-bit casts of the weights that autocast keeps for backward


def mix_lengths(count: int, max_length: int = 512) -> np.ndarray:
    """`count` lengths that represent REFERENCE 2's mix: the quantiles (i + 0.5) / count of its
    distribution, so a small batch has the mix's mean and its share of full-length sequences."""
    cdf = np.cumsum(length_pmf(max_length))
    quantiles = (np.arange(count) + 0.5) / count
    return np.minimum(np.searchsorted(cdf, quantiles, side="left"), max_length).astype(np.int64)


def synthetic_batch(lengths, max_predictions: int, vocab_size: int, seed: int = 0):
    """A PackedBatch of the given sequence lengths with MLPerf's masked-token counts."""
    rng = np.random.default_rng(seed)
    samples = []
    for length in (int(n) for n in lengths):
        masked = int(masked_count(np.array([length]), max_predictions)[0])
        positions = (
            np.sort(rng.choice(np.arange(1, length), size=min(masked, length - 1), replace=False))
            if length > 1
            else np.zeros(0)
        )
        samples.append(
            Sample(
                input_ids=rng.integers(0, vocab_size, length).astype(np.int16),
                segment_ids=(np.arange(length) >= length // 2).astype(np.int8),
                masked_positions=positions.astype(np.int16),
                masked_ids=rng.integers(0, vocab_size, positions.shape[0]).astype(np.int16),
                nsp_label=int(rng.integers(0, 2)),
            )
        )
    return pack_samples(samples)


class CudaLikeRun(TorchFunctionMode):
    """CUDA autocast's dtype policy and fused attention, on the meta device (module doc)."""

    def __init__(self, dtype: torch.dtype | None):
        super().__init__()
        self.dtype = dtype
        self.weight_casts: dict[int, torch.Tensor] = {}  # id(parameter) -> its 16-bit cast

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.dtype is not None and func in AUTOCAST_16BIT:
            args, kwargs = self._cast(args, self.dtype), self._cast(kwargs, self.dtype)
        elif self.dtype is not None and func in AUTOCAST_FP32:
            args, kwargs = self._cast(args, torch.float32), self._cast(kwargs, torch.float32)
        if func is F.scaled_dot_product_attention:
            return fused_attention(*args, **kwargs)
        return func(*args, **kwargs)

    def _cast(self, value, dtype):
        if isinstance(value, (list, tuple)):
            return type(value)(self._cast(v, dtype) for v in value)
        if isinstance(value, dict):
            return {k: self._cast(v, dtype) for k, v in value.items()}
        if not (torch.is_tensor(value) and value.is_floating_point()) or value.dtype == dtype:
            return value
        if isinstance(value, torch.nn.Parameter) and dtype != torch.float32:
            if id(value) not in self.weight_casts:  # autocast's weight cache
                self.weight_casts[id(value)] = value.to(dtype)
            return self.weight_casts[id(value)]
        return value.to(dtype)


def fused_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """SDPA through the memory-efficient kernel's aten op: saves what CUDA's fused kernels save.
    q, k, v: (B, heads, S, d); attn_mask: bool, broadcastable to (B, heads, S, S)."""
    bias = None
    if attn_mask is not None:
        bias = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(~attn_mask, float("-inf"))
        bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, dropout_p, is_causal, scale=scale
    )[0]
    return out


def count_saved(
    cfg: ModelConfig,
    lengths,
    precision: str = "fp32",
    device: str = "meta",
    max_predictions: int = 76,
    seed: int = 0,
) -> SavedBytes:
    """Bytes saved for backward by one forward of `cfg`'s model on sequences of `lengths`.

    device "meta": CUDA-like (module doc), any size, nothing computed; "cpu": a real run.
    precision: fp32, bf16 or fp16 (autocast; emulated on meta, CPU autocast on the CPU)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = BertForPretraining(cfg)
    model.train()
    batch = synthetic_batch(lengths, max_predictions, cfg.vocab_size, seed).to(device)
    storages: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage._cdata] = storage.nbytes()
        return tensor

    emulation = CudaLikeRun(LOW_PRECISION.get(precision)) if device == "meta" else None
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        if emulation is not None:
            with emulation:
                _forward(model, batch)
        else:
            with torch.autocast(
                "cpu",
                dtype=LOW_PRECISION.get(precision, torch.bfloat16),
                enabled=precision in LOW_PRECISION,
            ):
                _forward(model, batch)
    # the weights themselves (saved by reference) are parameters, not activations
    for param in model.parameters():
        storages.pop(param.untyped_storage()._cdata, None)
    casts = (
        {t.untyped_storage()._cdata for t in emulation.weight_casts.values()}
        if emulation is not None
        else set()
    )
    weights = sum(n for key, n in storages.items() if key in casts)
    return SavedBytes(sum(storages.values()) - weights, weights)


def _forward(model: BertForPretraining, batch) -> torch.Tensor:
    mlm_logits, nsp_logits = model(batch)
    mlm, nsp = model.loss(mlm_logits, nsp_logits, batch)
    return mlm + nsp
