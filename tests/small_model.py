"""Small BERTs for the model tests: their configs and their random masked samples.

- `small_config(vocab_size, max_len, **sizes)`: a 2-layer, width-64 BERT (4 heads, FFN 128)
  without dropout; each test names the sizes it changes, so its model is stated in one line.
- `masked_sample(rng, length, vocab, positions, nsp_label)`: one sample of random token ids with
  the given positions masked (each test draws its own positions, so its batches stay its own).
- `forbid_host_reads(monkeypatch)`: every Tensor method that reads a value back to the host
  raises, the CPU stand-in for CUDA's sync debug mode.
"""

from __future__ import annotations

import numpy as np
import torch

from bert.model import ModelConfig
from data.packing import Sample

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# Methods that copy a tensor's value to the host (a sync on a GPU).
HOST_READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")


def small_config(
    vocab_size: int,
    max_len: int,
    hidden: int = 64,
    heads: int = 4,
    ffn: int = 128,
    layers: int = 2,
    dropout: bool = False,
    **changed,
) -> ModelConfig:
    """A small BERT, dropout off unless `dropout` (then the config's own rates); `changed` (any
    other ModelConfig field) on top."""
    values = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=max_len,
        **({} if dropout else NO_DROPOUT),
    )
    return ModelConfig(**{**values, **changed})


def masked_sample(
    rng: np.random.Generator, length: int, vocab: int, positions: np.ndarray, nsp_label: int
) -> Sample:
    """Token ids drawn from [1, vocab), the second half segment 1, `positions` masked with labels
    drawn from [0, vocab) (ids first, then labels: the draws' order is the tests' data)."""
    return Sample(
        rng.integers(1, vocab, length).astype(np.int16),
        (np.arange(length) >= length // 2).astype(np.int8),
        positions.astype(np.int16),
        rng.integers(0, vocab, positions.size).astype(np.int16),
        nsp_label,
    )


def forbid_host_reads(monkeypatch) -> None:
    """Makes every host read of a tensor's value (HOST_READS) an AssertionError."""

    def refuse(name):
        def raiser(self, *args, **kwargs):
            raise AssertionError(
                f"Tensor.{name}() inside the training step: a host read (a device sync on a GPU)"
            )

        return raiser

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
