"""What bench_throughput.py trains on: model sizes, synthetic batches, and the FLOP count.

Batches are built once, before any timing, and kept on the device in both layouts: packed
(`PackedBatch`, what this project's model reads) and padded (the dict HF `BertForPreTraining`
reads). Every variant therefore trains on exactly the same samples, and the host-side data
pipeline is not part of what is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from bert.config import load_config
from bert.model import ModelConfig
from data.packing import PackedBatch, Sample, pack_samples
from data.synthetic_language import generate_samples, successor_table

VOCAB_SIZE = 30522
MAX_LENGTH = 512
TINY_CPU_CONFIG = "tiny_cpu"  # the shipped configs/tiny_cpu.yaml (bert.config.find_config)
MAX_PREDICTIONS = 76  # REFERENCE 2: masked_lm_prob 0.15, at most 76 per sequence

# hidden, layers, heads, FFN. "tiny" is the default run's model (configs/tiny_cpu.yaml, with its
# vocabulary and positions: model_config); "mini" only keeps the script's own test fast;
# "l4_h256" is what "tiny" meant before it was named for the default run (the records
# benchmarks/results/amd-epyc_tiny_20261122-*.json were measured at that size).
MODEL_SIZES = {
    "mini": (64, 2, 2, 128),
    "tiny": (128, 2, 2, 512),
    "l4_h256": (256, 4, 4, 1024),
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
}


def model_config(size: str, attention: str = "padded_sdpa") -> ModelConfig:
    """BERT of `size` with dropout (0.1, training): "tiny" is configs/tiny_cpu.yaml's model,
    the others have MLPerf's vocabulary and 512 positions."""
    hidden, layers, heads, ffn = MODEL_SIZES[size]
    vocab, positions = VOCAB_SIZE, MAX_LENGTH
    if size == "tiny":
        tiny = load_config(TINY_CPU_CONFIG).model
        vocab, positions = tiny.vocab_size, tiny.max_position_embeddings
    cfg = ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=positions,
        attention=attention,
    )
    return cfg


def hf_config(cfg: ModelConfig):
    """The same architecture as a HuggingFace BertConfig, with SDPA attention."""
    import transformers

    return transformers.BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.layer_norm_eps,
        attn_implementation="sdpa",
    )


def make_samples(
    num_batches: int,
    batch: int,
    seed: int,
    max_length: int = MAX_LENGTH,
    vocab_size: int = VOCAB_SIZE,
) -> list[list[Sample]]:
    """num_batches local batches of synthetic samples with REFERENCE 2's length mix.

    data.synthetic draws the lengths from the real training set's histogram and masks 15% of
    the word tokens (at most 76), like the MLPerf data.
    """
    rng = np.random.default_rng(seed)
    samples = generate_samples(
        rng, successor_table(seed, vocab_size), num_batches * batch, max_length, MAX_PREDICTIONS
    )
    return [samples[i * batch : (i + 1) * batch] for i in range(num_batches)]


def padded_inputs(samples: list[Sample], pad_to: int) -> dict[str, torch.Tensor]:
    """HF inputs (B, pad_to): ids, segments, attention mask, MLM labels (-100 = unmasked)."""
    batch = len(samples)
    input_ids = np.zeros((batch, pad_to), dtype=np.int64)
    segments = np.zeros_like(input_ids)
    mask = np.zeros_like(input_ids)
    labels = np.full_like(input_ids, -100)
    for i, s in enumerate(samples):
        n = s.input_ids.shape[0]
        input_ids[i, :n] = s.input_ids
        segments[i, :n] = s.segment_ids
        mask[i, :n] = 1
        labels[i, s.masked_positions.astype(np.int64)] = s.masked_ids
    nsp = np.array([s.nsp_label for s in samples], dtype=np.int64)
    arrays = dict(
        input_ids=input_ids,
        token_type_ids=segments,
        attention_mask=mask,
        labels=labels,
        next_sentence_label=nsp,
    )
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


@dataclass
class Workload:
    """The benchmark's batches on the device, both layouts, plus their length statistics."""

    packed: list[PackedBatch]
    padded: list[dict[str, torch.Tensor]]
    lengths: list[np.ndarray]  # (B,) real lengths per batch
    masked: list[int]  # masked tokens per batch
    padding: str  # "batch_max" or "max_length": what the padded layout pads to
    max_length: int = MAX_LENGTH  # the longest a sequence may be (the length mix's bound)
    masked_counts: list[np.ndarray] = field(default_factory=list)  # (B,) masked per sequence

    @property
    def batch_size(self) -> int:
        return int(self.lengths[0].shape[0])

    def stats(self) -> dict:
        tokens = [int(l.sum()) for l in self.lengths]
        padded = [int(p["input_ids"].numel()) for p in self.padded]
        return {
            "num_batches": len(self.lengths),
            "mean_real_tokens_per_batch": float(np.mean(tokens)),
            "mean_padded_tokens_per_batch": float(np.mean(padded)),
            "mean_masked_per_batch": float(np.mean(self.masked)),
            "mean_length": float(np.mean(np.concatenate(self.lengths))),
            "hf_padding": self.padding,
        }


def build_workload(
    num_batches: int,
    batch: int,
    seed: int,
    device: torch.device,
    padding: str = "batch_max",
    max_length: int = MAX_LENGTH,
    vocab_size: int = VOCAB_SIZE,
) -> Workload:
    """Batches for every variant. padding: pad HF inputs to each batch's max or to max_length.

    max_length below 512 scales the length histogram down (only for quick tests)."""
    groups = make_samples(num_batches, batch, seed, max_length, vocab_size)
    packed, padded, lengths, masked, counts = [], [], [], [], []
    for samples in groups:
        lens = np.array([s.input_ids.shape[0] for s in samples], dtype=np.int64)
        pad_to = int(lens.max()) if padding == "batch_max" else max_length
        # with the length groups, so that grouped_flash variants can read the same batches
        packed.append(pack_samples(samples, attention_groups=True, query_subset=True).to(device))
        padded.append({k: v.to(device) for k, v in padded_inputs(samples, pad_to).items()})
        lengths.append(lens)
        counts.append(np.array([s.masked_positions.shape[0] for s in samples], dtype=np.int64))
        masked.append(int(counts[-1].sum()))
    return Workload(packed, padded, lengths, masked, padding, max_length, counts)


# ---------------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------------

FLOP_FORMULA = (
    "useful training FLOPs per batch = 6*L*(4*h^2 + 2*h*F)*T  (encoder GEMMs, fwd+bwd) "
    "+ 12*L*h*sum(l_i^2)  (attention scores and context, fwd+bwd) "
    "+ 6*M*(h^2 + h*V)  (MLM transform and decoder on the M masked tokens) "
    "+ 6*B*(h^2 + 2*h)  (pooler and NSP); T = real tokens, l_i = sequence lengths, "
    "V = the model's vocabulary (30522; 1024 for tiny); "
    "biases, norms, embeddings and the optimizer are not counted. The same useful "
    "count is used for every variant (padded ones do more work, which is not credited)."
)


def train_flops(cfg: ModelConfig, lengths: np.ndarray, masked: int) -> float:
    """Useful training FLOPs (forward + backward) of one batch; see FLOP_FORMULA.

    lengths: (B,) real sequence lengths; masked: number of masked tokens in the batch.
    Passing padded lengths (all equal to the pad length) and all tokens as `masked` gives
    what a padded implementation that runs the MLM head everywhere actually executes.
    """
    h, L, F, V = (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size)
    lengths = np.asarray(lengths, dtype=np.float64)
    encoder = 6.0 * L * (4 * h * h + 2 * h * F) * lengths.sum()
    attention = 12.0 * L * h * float((lengths**2).sum())
    mlm = 6.0 * masked * (h * h + h * V)
    nsp = 6.0 * lengths.shape[0] * (h * h + 2 * h)
    return encoder + attention + mlm + nsp


def executed_flops(
    cfg: ModelConfig,
    lengths: np.ndarray,
    masked: int,
    attention_pad: int | None = None,
    queries: np.ndarray | None = None,
) -> float:
    """What this project's model computes for one batch (forward + backward), counted as
    train_flops counts: the same terms, on what actually runs.

    lengths: (B,) the sequences the layers run on (a CUDA graph's padding sequences
    included); masked: the MLM head's rows (a graph's padded count); attention_pad: the length
    every sequence is padded to inside attention (padded_sdpa: the batch's longest, or a
    graph's bound), None when the kernel runs the real lengths; queries: (B,) the last
    layer's query rows per sequence (model.last_layer_subset: [CLS] and the masked tokens),
    which then computes K and V for every token but Q, its output and its FFN for these only.
    """
    h, L, F, V = (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size)
    lengths = np.asarray(lengths, dtype=np.float64)
    keys = np.full_like(lengths, attention_pad) if attention_pad else lengths
    tokens = lengths.sum()
    layer = 6.0 * (4 * h * h + 2 * h * F)  # per token: QKV, output, FFN

    def attention(q: np.ndarray, k: np.ndarray) -> float:
        return 12.0 * h * float((q * k).sum())

    heads = 6.0 * masked * (h * h + h * V) + 6.0 * lengths.shape[0] * (h * h + 2 * h)
    if queries is None:
        return L * layer * tokens + L * attention(keys, keys) + heads
    q = np.asarray(queries, dtype=np.float64)
    q_keys = np.full_like(q, q.max()) if attention_pad else q
    last = 6.0 * 2 * h * h * tokens + 6.0 * (2 * h * h + 2 * h * F) * q.sum()
    return (
        (L - 1) * (layer * tokens + attention(keys, keys)) + last + attention(q_keys, keys) + heads
    )
