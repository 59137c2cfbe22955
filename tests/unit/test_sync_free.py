"""No host<->device sync inside a training step of the unpadded model (DESIGN: principles).

On a GPU, CUDA's sync debug mode turns every synchronizing call (`.item()`, a blocking copy to
the host, ...) inside forward, backward and the LAMB step into an error. Without a GPU, the
proxy test makes the Tensor methods that read device values on the host raise, which catches
the same mistakes in CI. Batches are built (and copied to the device) before the step, as the
prefetcher does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_gate import require_cuda
from small_model import forbid_host_reads, small_config
from bert.config import ModelConfig
from bert.model import BertForPretraining, pretraining_loss
from bert.optim import LAMB, param_groups
from data.packing import pack_samples
from data.synthetic_language import generate_samples, successor_table


def model_config(attention: str, vocab: int, max_len: int) -> ModelConfig:
    # dropout on, at the config's rates: its draws must not read back either
    return small_config(vocab, max_len, dropout=True, attention=attention)


def setup(
    attention: str, device: torch.device, vocab: int, max_len: int, batch: int, num_batches: int = 3
):
    """Model (dropout on), LAMB, and packed batches already on the device."""
    torch.manual_seed(0)
    cfg = model_config(attention, vocab, max_len)
    model = BertForPretraining(cfg).to(device).train()
    optimizer = LAMB(param_groups(model, 0.01), lr=1e-3)
    rng = np.random.default_rng(0)
    samples = generate_samples(
        rng, successor_table(0, vocab), batch * num_batches, max_len, max(1, max_len * 15 // 100)
    )
    batches = [
        pack_samples(samples[i * batch : (i + 1) * batch]).to(device) for i in range(num_batches)
    ]
    return cfg, model, optimizer, batches


def train_step(cfg, model, optimizer, batch, autocast_dtype=None) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(
        batch.input_ids.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
    ):
        mlm_logits, nsp_logits = model(batch)
    mlm, nsp = pretraining_loss(mlm_logits, nsp_logits, batch, cfg.vocab_size)
    loss = mlm + nsp
    loss.backward()
    optimizer.step()
    return loss.detach()


def test_training_step_reads_nothing_back_on_cpu(monkeypatch):
    """CPU proxy: the reference path's whole step runs with host reads forbidden."""
    cfg, model, optimizer, batches = setup("padded_sdpa", torch.device("cpu"), 1024, 128, 8)
    train_step(cfg, model, optimizer, batches[0])  # first step allocates the LAMB state
    forbid_host_reads(monkeypatch)
    losses = [train_step(cfg, model, optimizer, b) for b in batches]
    monkeypatch.undo()
    assert all(torch.isfinite(loss) for loss in losses)


def test_proxy_catches_a_host_read(monkeypatch):
    """Positive control: per_sequence reads lengths on the host by design (CPU-only backend)."""
    cfg, model, optimizer, batches = setup("per_sequence", torch.device("cpu"), 1024, 128, 4)
    forbid_host_reads(monkeypatch)
    with pytest.raises(AssertionError, match="tolist"):
        train_step(cfg, model, optimizer, batches[0])


@pytest.mark.gpu
@pytest.mark.parametrize(
    "attention,dtype",
    [("padded_sdpa", None), ("padded_sdpa", torch.bfloat16), ("flash_varlen", torch.bfloat16)],
)
def test_training_step_never_syncs_on_cuda(attention, dtype):
    """Realistic token counts (batch 16, max length 512, about 4k tokens): some CUDA kernels
    (e.g. embedding backward) take a different, possibly syncing, path above a few thousand."""
    require_cuda()  # queried at run time, never at collection
    device = torch.device("cuda")
    cfg, model, optimizer, batches = setup(attention, device, 30522, 512, 16)
    train_step(cfg, model, optimizer, batches[0], dtype)  # allocations, library handles
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [train_step(cfg, model, optimizer, b, dtype) for b in batches]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert all(torch.isfinite(loss).item() for loss in losses)
