"""Plain-PyTorch twins of the fused kernels: the test oracle and the CPU implementation.

Two kinds of function per op:
- `<op>_ref`: the unfused composition the model would otherwise run (differentiable by autograd);
- `<op>_forward_ref` / `<op>_backward_ref` (or the op's own name): the exact contract of the
  CUDA entry points, outputs and saved tensors included, with the backward written out by hand.
  The CPU kernels of the custom ops are these functions, so the bindings are testable without
  a GPU.

The dropout mask of `bias_dropout_residual_layernorm` is reproduced bit for bit: the CUDA kernel
draws from a stateless Philox4x32-10 keyed by (seed, offset, row, column), and `dropout_keep_mask`
evaluates the same function with numpy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

HIDDEN = 1024
MASK_WORDS = HIDDEN // 32  # int32 words of dropout mask per row
PHILOX_INCREMENT = 8  # draws per subsequence one bias_dropout_residual_layernorm call reserves

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LOW32 = np.uint64(0xFFFFFFFF)


# ---- Philox and the dropout mask -----------------------------------------------------------
def philox4x32_10(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10 block function. counter: (..., 4) uint32; key: (..., 2) uint32 -> (..., 4)."""
    c = [counter[..., i].astype(np.uint64) for i in range(4)]
    k0, k1 = key[..., 0].astype(np.uint64), key[..., 1].astype(np.uint64)
    for _ in range(10):
        p0, p1 = _M0 * c[0], _M1 * c[2]  # < 2**64: exact in uint64
        c = [
            (p1 >> np.uint64(32)) ^ c[1] ^ k0,
            p1 & _LOW32,
            (p0 >> np.uint64(32)) ^ c[3] ^ k1,
            p0 & _LOW32,
        ]
        k0, k1 = (k0 + _W0) & _LOW32, (k1 + _W1) & _LOW32
    return np.stack(c, axis=-1).astype(np.uint32)


def drop_threshold(p: float) -> int:
    """A draw below floor(p * 2**32) drops the element; computed as the C++ binding does."""
    return min(int(p * 4294967296.0), 4294967295)


def dropout_keep_mask(rows: int, p: float, seed: int, offset: int) -> torch.Tensor:
    """(rows, 1024) bool keep mask that bias_dropout_residual_layernorm draws for (seed, offset).

    Column c of row r uses subsequence r * 128 + c // 8, counter block offset // 4 + (c % 8) // 4
    and draw (c % 8) % 4 of that block.
    """
    threshold = drop_threshold(p)
    if threshold == 0 or rows == 0:
        return torch.ones(rows, HIDDEN, dtype=torch.bool)
    subseq = np.arange(rows * (HIDDEN // 8), dtype=np.uint64)
    key = np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], dtype=np.uint32)
    blocks = []
    for block in range(2):
        lo = offset // 4 + block
        counter = np.empty((subseq.size, 4), dtype=np.uint32)
        counter[:, 0] = lo & 0xFFFFFFFF
        counter[:, 1] = (lo >> 32) & 0xFFFFFFFF
        counter[:, 2] = (subseq & _LOW32).astype(np.uint32)
        counter[:, 3] = (subseq >> np.uint64(32)).astype(np.uint32)
        blocks.append(philox4x32_10(counter, np.broadcast_to(key, (subseq.size, 2))))
    draws = np.concatenate(blocks, axis=1).reshape(rows, HIDDEN)
    return torch.from_numpy(draws >= np.uint32(threshold))


def pack_dropout_mask(keep: torch.Tensor) -> torch.Tensor:
    """(rows, 1024) bool -> (rows, 32) int32 in the kernel's layout.

    Word l of a row holds columns (c * 32 + l) * 8 + j at bit c * 8 + j (c < 4, j < 8): the 32
    columns one lane of the row's warp owns.
    """
    rows = keep.shape[0]
    k = keep.reshape(rows, 4, 32, 8).permute(0, 2, 1, 3).reshape(rows, 32, 32).to(torch.int64)
    words = (k << torch.arange(32, dtype=torch.int64, device=k.device)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_dropout_mask(words: torch.Tensor) -> torch.Tensor:
    """(rows, 32) int32 -> (rows, 1024) bool keep mask; inverse of pack_dropout_mask."""
    rows = words.shape[0]
    w = words.to(torch.int64) & 0xFFFFFFFF
    bits = (w.unsqueeze(-1) >> torch.arange(32, device=words.device)) & 1
    return bits.reshape(rows, 32, 4, 8).permute(0, 2, 1, 3).reshape(rows, HIDDEN).bool()


# ---- bias + dropout + residual + LayerNorm -------------------------------------------------
def bias_dropout_residual_layernorm_ref(
    x, bias, residual, weight, ln_bias, p: float, eps: float, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """LayerNorm(residual + dropout(x + bias)) with torch ops, in the inputs' dtypes.

    x, residual: (T, H); bias, weight, ln_bias: (H,); keep: (T, H) bool, required when p > 0.
    """
    h = x + bias
    if p > 0:
        if keep is None:
            raise ValueError("a keep mask is required when p > 0")
        h = h * keep.to(h.dtype) * (1.0 / (1.0 - p))
    return F.layer_norm(residual + h, (x.shape[-1],), weight, ln_bias, eps)


def bdrln_forward_ref(
    x, bias, residual, weight, ln_bias, p: float, eps: float, seed: int, offset: int
):
    """The CUDA forward's contract in fp32: -> (y, z, mean, rstd, mask).

    y, z: (T, 1024) x.dtype, z = residual + dropout(x + bias); mean, rstd: (T,) fp32;
    mask: (T, 32) int32 packed keep bits (pack_dropout_mask).
    """
    rows = x.shape[0]
    keep = dropout_keep_mask(rows, p, seed, offset).to(x.device)
    scale = 1.0 / (1.0 - p) if drop_threshold(p) else 1.0
    h = (x.float() + bias.float()) * torch.tensor(scale, dtype=torch.float32)
    z = residual.float() + torch.where(keep, h, torch.zeros_like(h))
    mean = z.mean(-1)
    rstd = torch.rsqrt(((z - mean[:, None]) ** 2).mean(-1) + eps)
    y = (z - mean[:, None]) * rstd[:, None] * weight.float() + ln_bias.float()
    return y.to(x.dtype), z.to(x.dtype), mean, rstd, pack_dropout_mask(keep).to(x.device)


def bdrln_backward_ref(grad_y, z, mean, rstd, mask, weight, p: float):
    """The CUDA backward's contract, the LayerNorm gradient written out (fp32 math).

    -> (dx, dresidual, dweight, dln_bias, dbias); the first two in z.dtype, the rest in
    weight.dtype. With xhat = (z - mean) * rstd and g = dy * weight:
    dz = rstd * (g - mean(g) - xhat * mean(g * xhat)); dx = dz * keep / (1 - p).
    """
    dy, w = grad_y.float(), weight.float()
    xhat = (z.float() - mean[:, None]) * rstd[:, None]
    g = dy * w
    dz = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    keep = unpack_dropout_mask(mask).to(dz.device)
    scale = 1.0 / (1.0 - p) if drop_threshold(p) else 1.0
    dx = torch.where(keep, dz * torch.tensor(scale, dtype=torch.float32), torch.zeros_like(dz))
    pd = weight.dtype
    return (
        dx.to(z.dtype),
        dz.to(z.dtype),
        (dy * xhat).sum(0).to(pd),
        dy.sum(0).to(pd),
        dx.sum(0).to(pd),
    )


# ---- embedding backward --------------------------------------------------------------------
def embedding_backward_ref(
    grad: torch.Tensor, indices: torch.Tensor, num_weights: int, out_dtype: torch.dtype
) -> torch.Tensor:
    """grad: (T, H); indices: (T,) -> (num_weights, H): fp32 (or fp64) scatter-add, one rounding."""
    acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
    out = torch.zeros(num_weights, grad.shape[1], dtype=acc, device=grad.device)
    return out.index_add_(0, indices.long(), grad.to(acc)).to(out_dtype)


# ---- softmax cross-entropy -----------------------------------------------------------------
def softmax_cross_entropy_ref(
    logits: torch.Tensor, labels: torch.Tensor, vocab_size: int, ignore_index: int, need_grad: bool
):
    """The CUDA forward's contract: -> (losses (M,) fp32, grad (M, V_pad) logits.dtype).

    losses[m] = logsumexp(logits[m, :vocab]) - logits[m, label]; 0 where label == ignore_index,
    NaN for any other label outside [0, vocab). grad = softmax - one_hot (zero on padding columns
    and ignored rows); (0, V_pad) when need_grad is False.
    """
    rows, cols = logits.shape
    lf = logits[:, :vocab_size].float()
    lse = torch.logsumexp(lf, dim=-1)
    ignored = labels == ignore_index
    valid = (labels >= 0) & (labels < vocab_size)
    safe = torch.where(valid, labels, torch.zeros_like(labels))
    picked = lf.gather(1, safe[:, None]).squeeze(1)
    nan = torch.full_like(lse, float("nan"))
    losses = torch.where(ignored, torch.zeros_like(lse), torch.where(valid, lse - picked, nan))
    if not need_grad:
        return losses, logits.new_empty(0, cols)
    grad = torch.softmax(lf, dim=-1) - F.one_hot(safe, vocab_size).float()
    grad = torch.where(valid[:, None], grad, torch.full_like(grad, float("nan")))
    grad = torch.where(ignored[:, None], torch.zeros_like(grad), grad)
    return losses, F.pad(grad, (0, cols - vocab_size)).to(logits.dtype)


def softmax_cross_entropy_backward_ref(grad: torch.Tensor, grad_loss: torch.Tensor) -> torch.Tensor:
    """grad (M, V_pad) scaled row-wise by grad_loss (M,) in fp32, returned in grad.dtype."""
    return (grad.float() * grad_loss.float()[:, None]).to(grad.dtype)
