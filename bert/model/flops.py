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


def coefficients(cfg: ModelConfig) -> tuple[float, float, float, float]:
    """Forward FLOPs per real token, per squared sequence length, per masked token and per
    sequence: every count in this module (the average sample's and a packed batch's) is these
    four weights times the matching totals."""
    h, inner, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    per_token = layers * 2 * (3 * h * h + h * h + 2 * h * inner)  # QKV, output, two FFN GEMMs
    per_square = layers * 4 * h  # QK^T and PV: 2 l^2 h each
    per_masked = 2 * (h * h + h * cfg.padded_vocab_size)  # MLM transform and tied decoder
    per_sequence = 2 * (h * h + 2 * h)  # pooler and NSP on [CLS]
    return per_token, per_square, per_masked, per_sequence


def forward_flops(cfg: ModelConfig, mix: LengthMix) -> float:
    """Forward FLOPs of one average sample."""
    per_token, per_square, per_masked, per_sequence = coefficients(cfg)
    return (
        per_token * mix.mean_tokens
        + per_square * mix.mean_square
        + per_masked * mix.mean_masked
        + per_sequence
    )


def training_flops(cfg: ModelConfig, mix: LengthMix) -> float:
    """Forward and backward FLOPs of one average sample (backward = 2 x forward)."""
    return 3 * forward_flops(cfg, mix)


def batch_flops(
    cfg: ModelConfig, tokens: int, square_sum: float, masked: int, sequences: int
) -> float:
    """Useful training FLOPs of one packed batch: `tokens` real tokens T, `square_sum` the
    sum(l_i^2) over its sequences, `masked` masked tokens M and `sequences` sequences B:

        6 L (4h^2 + 2hF) T  +  12 L h sum(l_i^2)  +  6 M (h^2 + hV)  +  6 B (h^2 + 2h)

    (V the padded vocabulary). Padding is never credited."""
    per_token, per_square, per_masked, per_sequence = coefficients(cfg)
    return 3.0 * (
        per_token * tokens
        + per_square * square_sum
        + per_masked * masked
        + per_sequence * sequences
    )
