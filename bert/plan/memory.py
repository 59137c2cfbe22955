"""Device memory per GPU of one training configuration, by component.

The static part follows this program's own storage (bert/optim): the model keeps fp32 weights
and fp32 gradients (autocast computes in 16 bits); replicated LAMB (optim.sharded=false) keeps
fp32 moments for every weight and DDP a bucket copy of every gradient (more than one rank);
the sharded optimizer (optim.sharded=true, ZeRO-2) keeps fp32 master weights, moments, the
update direction and the reduced gradient for 1/W of the weights (W ranks share the state; with
W = 1 the gradient shard is the flat gradient itself).

The activations and the 16-bit weight copies are counted by running the model
(bert/plan/activations.py) on a batch representing the MLPerf length mix, and on full-length
(512-token) sequences for the worst case, then scaled to the micro-batch: activation memory is
linear in the number of sequences of a given mix, and every padded-attention tensor is sized by
the longest sequence, which a batch of the mix almost always has at full length.

Estimates, not counts, printed as such: the evaluation working set (one layer's largest live
tensors and the MLM logits of an eval batch; training activations are freed by then, so the
peak is the larger of the two) and the runtime's own memory (CUDA context, cuBLAS workspaces,
NCCL buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

from bert.model.config import ModelConfig

# The counts below build the model (torch) when first asked for; importing this module does not,
# so the planner's --help and its input errors answer without torch (bert/plan/cli.py).

GIB = 2**30
RUNTIME_GIB = 1.5  # CUDA context, cuBLAS/cuBLASLt workspaces, NCCL buffers (assumption)
REFERENCE_SEQUENCES = 32  # sequences of the mix the activations are counted on


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by component; `total_*` include the runtime assumption."""

    parts: dict  # component -> bytes (static parts)
    activations_mix: float  # one micro-batch at the MLPerf length mix
    activations_512: float  # one micro-batch of full-length sequences (the worst case)
    eval_working_set: float
    runtime: float

    def total(self, worst: bool = False) -> float:
        activations = self.activations_512 if worst else self.activations_mix
        return sum(self.parts.values()) + max(activations, self.eval_working_set) + self.runtime


_COUNTED: dict[tuple, tuple[float, float, int]] = {}  # one count per model and precision


def per_sequence(
    cfg: ModelConfig, precision: str, max_length: int, max_predictions: int
) -> tuple[float, float, int]:
    """(activation bytes per sequence at the mix, per full-length sequence, 16-bit weight
    bytes), counted on the meta device."""
    key = (repr(cfg), precision, max_length, max_predictions)
    if key not in _COUNTED:
        from bert.plan.activations import count_saved, mix_lengths

        mix = count_saved(
            cfg, mix_lengths(REFERENCE_SEQUENCES, max_length), precision, "meta", max_predictions
        )
        full = count_saved(cfg, [max_length] * 2, precision, "meta", max_predictions)
        _COUNTED[key] = (
            mix.activations / REFERENCE_SEQUENCES,
            full.activations / 2,
            mix.weight_copies,
        )
    return _COUNTED[key]


_PARAMETERS: dict[str, int] = {}


def parameter_count(cfg: ModelConfig) -> int:
    """Parameters of `cfg`'s model (the tied decoder counted once), built on the meta device."""
    key = repr(cfg)
    if key not in _PARAMETERS:
        import torch

        from bert.model.modeling import BertForPretraining, num_parameters

        with torch.device("meta"):
            _PARAMETERS[key] = num_parameters(BertForPretraining(cfg))
    return _PARAMETERS[key]


def estimate(
    cfg: ModelConfig,
    precision: str,
    micro_batch: int,
    world: int,
    sharded: bool,
    eval_batch: int = 128,
    max_length: int = 512,
    max_predictions: int = 76,
) -> Memory:
    """Memory per GPU for `micro_batch` sequences per forward on `world` data-parallel ranks."""
    mix, full, weight_copies = per_sequence(cfg, precision, max_length, max_predictions)
    params = parameter_count(cfg)
    parts = {"parameters (fp32)": 4.0 * params, "gradients (fp32)": 4.0 * params}
    if sharded:
        state = (4 * 4.0 + (4.0 if world > 1 else 0.0)) * params / world
        parts[f"optimizer state, sharded over {world}"] = state
    else:
        parts["optimizer state (LAMB moments, fp32)"] = 8.0 * params
        if world > 1:
            parts["DDP gradient buckets"] = 4.0 * params
    if weight_copies:
        parts["16-bit weight copies (autocast)"] = float(weight_copies)
    return Memory(
        parts,
        mix * micro_batch,
        full * micro_batch,
        eval_working_set(cfg, precision, eval_batch, max_length, max_predictions),
        RUNTIME_GIB * GIB,
    )


def eval_working_set(
    cfg: ModelConfig, precision: str, eval_batch: int, max_length: int, max_predictions: int
) -> float:
    """Estimate: the largest live tensors of one layer's no-grad forward on `eval_batch`
    full-length sequences (fp32 residual in and out, QKV and padded q/k/v, the FFN's two inner
    tensors) plus the eval batch's MLM logits and their fp32 copy."""
    width = 2 if precision in ("bf16", "fp16") else 4
    tokens = eval_batch * max_length
    h, inner = cfg.hidden_size, cfg.intermediate_size
    layer = tokens * (2 * 4 * h + 2 * 3 * h * width + 2 * inner * width)
    logits = eval_batch * max_predictions * cfg.padded_vocab_size * (width + 4)
    return float(layer + logits)
