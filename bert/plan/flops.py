"""FLOPs of one training sample of BERT at the MLPerf length mix, unpadded and padded.

Counted from the model's shapes (a matrix product of m x k by k x n is 2mkn FLOPs; backward is
twice the forward): per token and layer the QKV, attention-output and two FFN products; per
sequence and layer the two attention products (QK^T and PV, 4 l^2 h for length l); the MLM head
(transform and the tied decoder) on the masked tokens only and the pooler and NSP layer on [CLS],
as this program computes them. Element-wise work (LayerNorm, GeLU, softmax, dropout) is left out:
it costs memory traffic, not tensor-core FLOPs. "Padded" is the same model on every sequence
padded to the maximum length (what a padded implementation computes; the heads the same).

The length mix is REFERENCE 2's histogram (data/order/lengths.py); the masked tokens of a sequence
of length l are min(76, max(1, round(0.15 l))), the rule of the MLPerf data preparation
(REFERENCE 2: masked_lm_prob 0.15, max_predictions_per_seq 76).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bert.model.config import ModelConfig
from data.order.lengths import length_pmf

MASKED_LM_PROB = 0.15


def masked_count(lengths: np.ndarray, max_predictions: int) -> np.ndarray:
    """Masked tokens per sequence of each length (MLPerf data preparation's rule)."""
    return np.minimum(max_predictions, np.maximum(1, np.round(lengths * MASKED_LM_PROB)))


@dataclass(frozen=True)
class LengthMix:
    """Expectations over the length distribution that the FLOP count needs."""

    mean_tokens: float  # E[l]
    mean_square: float  # E[l^2]
    mean_masked: float  # E[masked tokens]
    max_length: int

    @classmethod
    def mlperf(cls, max_length: int = 512, max_predictions: int = 76) -> "LengthMix":
        pmf = length_pmf(max_length)
        lengths = np.arange(max_length + 1, dtype=np.float64)
        return cls(
            float(pmf @ lengths),
            float(pmf @ lengths**2),
            float(pmf @ masked_count(lengths, max_predictions)),
            max_length,
        )

    def padded(self) -> "LengthMix":
        """Every sequence padded to the maximum length (the masked tokens unchanged)."""
        return LengthMix(
            float(self.max_length), float(self.max_length) ** 2, self.mean_masked, self.max_length
        )


def forward_flops(cfg: ModelConfig, mix: LengthMix) -> float:
    """Forward FLOPs of one average sample."""
    h, inner, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    per_token_layer = 2 * (3 * h * h + h * h + 2 * h * inner)
    per_square_layer = 4 * h  # QK^T and PV: 2 l^2 h each
    encoder = layers * (per_token_layer * mix.mean_tokens + per_square_layer * mix.mean_square)
    mlm = mix.mean_masked * 2 * (h * h + h * cfg.padded_vocab_size)
    nsp = 2 * (h * h + 2 * h)
    return encoder + mlm + nsp


def training_flops(cfg: ModelConfig, mix: LengthMix) -> float:
    """Forward and backward FLOPs of one average sample (backward = 2 x forward)."""
    return 3 * forward_flops(cfg, mix)
