"""The fused kernels of the model: one record per `model.fused_*` flag (`FUSED_OPS`).

A record names the kernels/ op it needs, its config flag's description, its shape limits (which
ModelConfig checks, on the CPU too) and the layer functions it replaces
(bert/model/layer_functions.py). ModelConfig declares one flag per record and the model picks
its functions from the records of the flags that are on (`layer_functions`), so adding a
fusion of an existing layer function is its own files (the kernel, kernels/<op>.py, its test
and benchmark) plus one record here, with its replacement functions in fused_functions.py. The
plain-PyTorch reference of each stays the CPU path and the test oracle. The attention backends are
in bert/model/attention.py.

A record names its replacement functions by dotted path (bert/core/lazy.py), so this module
imports no torch: the config, `--help-config` and the planner read the records, and torch is
imported when a model is built (`layer_functions`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from bert.core.benchmarks import KernelBench
from bert.core.lazy import Ref, load

if TYPE_CHECKING:
    import torch

    from bert.model.layer_functions import LayerFunctions

    from bert.model.config import ModelConfig


@dataclass(frozen=True)
class FusedOp:
    kernel: str  # the kernels/ op (kernels.OPS) the flag switches on
    doc: str  # the model.<flag> description --help-config prints
    # layer function (layer_functions.REFERENCE) -> its fused replacement, or where it is
    # (_fn: fused_functions.py, imported when a model is built)
    replaces: Mapping[str, Ref]
    # what the flag needs that `cfg` lacks, as "<what> ..., got <value>"; None when it fits
    check: Callable[["ModelConfig"], Optional[str]] = lambda cfg: None
    # the record (benchmarks/results/gpu/...) of the window whose GPU tests passed for this
    # switch; None: not validated on a GPU yet, so off in every config (bert/gpu_status.py)
    gpu_validated: Optional[str] = None
    # its kernel's microbenchmark, which the GPU window runs (records of one kernel name it
    # once between them: each script runs once)
    bench: Optional[KernelBench] = None


# ---- shape limits ------------------------------------------------------------------------------
# The kernels' sizes (kernels.reference.HIDDEN, kernels.dense.FEATURE_MULTIPLE), stated again here
# because importing the kernels package registers its ops, which loads torch;
# tests/unit/test_registries.py checks that they agree.
HIDDEN = 1024  # the one hidden size the LayerNorm and embedding kernels instantiate
FEATURE_MULTIPLE = 8  # cuBLASLt: in and out features of every fused GEMM


def _hidden_1024(cfg: "ModelConfig") -> Optional[str]:
    if cfg.hidden_size == HIDDEN:
        return None
    return (
        f"model.hidden_size={HIDDEN} (the kernel is built for BERT-Large only), got "
        f"{cfg.hidden_size}"
    )


def _padded_vocab(cfg: "ModelConfig", what: str = "") -> Optional[str]:
    if cfg.padded_vocab_size % FEATURE_MULTIPLE == 0:
        return None
    return (
        f"the padded vocabulary{what} to be a multiple of {FEATURE_MULTIPLE}, got "
        f"{cfg.padded_vocab_size} (model.pad_vocab_to_multiple_of="
        f"{cfg.pad_vocab_to_multiple_of})"
    )


def gemm_features(cfg: "ModelConfig", multiple: int, why: str) -> Optional[str]:
    """model.hidden_size and intermediate_size (the in and out features of every encoder GEMM)
    as multiples of `multiple`: the first that is not, as "<what> (`why`), got <value>"."""
    for name in ("hidden_size", "intermediate_size"):
        if getattr(cfg, name) % multiple:
            return f"model.{name} to be a multiple of {multiple} ({why}), got {getattr(cfg, name)}"
    return None


def _gemm_features(cfg: "ModelConfig") -> Optional[str]:
    """cuBLASLt's epilogues: in and out features of every fused GEMM a multiple of 8."""
    return gemm_features(cfg, FEATURE_MULTIPLE, "cuBLASLt GEMM features")


def _dense(cfg: "ModelConfig") -> Optional[str]:
    return _gemm_features(cfg) or _padded_vocab(cfg, " (the MLM decoder's output features)")


def _dense_gelu(cfg: "ModelConfig") -> Optional[str]:
    if cfg.hidden_act != "gelu_tanh":
        return (
            f"model.hidden_act=gelu_tanh (cuBLASLt's GeLU epilogue is the tanh "
            f"approximation), got {cfg.hidden_act!r}; with erf gelu (MLPerf's reference "
            f"BERT) use model.fused_dense alone"
        )
    return _gemm_features(cfg)


def _fn(name: str) -> str:
    """A fused layer function of bert/model/fused_functions.py, by dotted path."""
    return f"bert.model.fused_functions:{name}"


# The windows that validated a switch on a GPU (an H200, sm_90 like the H100): every GPU test of
# its kernel and of the fused model passed in 2026-11-28 (290 of 290 at 4afd552), and the
# learning proof with every one of these switches on (and the fused LAMB) reached MLPerf's 0.720
# in as many samples as the reference in 2026-11-28b (fc38826). Not yet rerun on an H100; never
# run on an A100 (sm_80). fused_dense_gelu's tests passed too, but it needs tanh GeLU, which the
# learning proof's (MLPerf's) erf model does not use: not validated.
VALIDATED_ON_H200 = "benchmarks/results/gpu/2026-11-28_window"
# the window's compiled runs at a size that fits its time
DENSE_BENCH = KernelBench("bench_dense", compiled=("--tokens", "16384"))

# ---- the table: config flag -> kernel, description, shape limits, replaced functions -----------
FUSED_OPS: dict[str, FusedOp] = {
    "fused_bias_dropout_residual_layernorm": FusedOp(
        "bias_dropout_residual_layernorm",
        "end of every attention/FFN sublayer",
        {"sublayer_end": _fn("fused_sublayer_end")},
        _hidden_1024,
        gpu_validated=VALIDATED_ON_H200,
        bench=KernelBench("bench_bias_dropout_residual_layernorm", compiled=("--tokens", "16384")),
    ),
    "fused_embedding_backward": FusedOp(
        "embedding_backward",
        "word-embedding gradient with packed atomics",
        {"word_embedding": _fn("fused_backward_word_embedding")},
        _hidden_1024,
        gpu_validated=VALIDATED_ON_H200,
        bench=KernelBench("bench_embedding_backward"),
    ),
    "fused_mlm_loss": FusedOp(
        "softmax_cross_entropy",
        "MLM softmax cross-entropy, its gradient made in the forward",
        {"mlm_cross_entropy": _fn("fused_mlm_cross_entropy")},
        _padded_vocab,
        gpu_validated=VALIDATED_ON_H200,
        bench=KernelBench("bench_softmax_cross_entropy", compiled=("--rows", "4096")),
    ),
    "fused_dense": FusedOp(
        "dense",
        "cuBLASLt dense layers (kernels/dense.py), the bias, GeLU and gradient reductions in "
        "the GEMMs' epilogues; every dense layer's in and out features must be multiples of 8. "
        "fused_dense: GEMM + bias as one GEMM (bias gradient inside the weight-gradient GEMM) "
        "for QKV, attention output, FFN (unless fused_dense_gelu), MLM transform, decoder and "
        "pooler; the residual's gradient is added inside the QKV/FFN data-gradient GEMM. Fits "
        "either GeLU.",
        {"linear": _fn("fused_linear"), "linear_with_residual": _fn("fused_linear_with_residual")},
        _dense,
        gpu_validated=VALIDATED_ON_H200,
        bench=DENSE_BENCH,
    ),
    "fused_dense_gelu": FusedOp(
        "dense",
        "fused_dense_gelu: GEMM + bias + GeLU as one GEMM, and GeLU' + bias gradient inside the "
        "next data-gradient GEMM: FFN and MLM transform. cuBLASLt's GeLU is the tanh "
        "approximation, so it needs hidden_act=gelu_tanh: open division / experimental "
        "(MLPerf's BERT uses erf gelu).",
        {"linear_gelu": _fn("fused_linear_gelu"), "feed_forward": _fn("fused_gelu_feed_forward")},
        _dense_gelu,
        bench=DENSE_BENCH,
    ),
}
# Config flag -> the kernels/ op it switches on.
FUSED_KERNELS = {flag: op.kernel for flag, op in FUSED_OPS.items()}


def enabled(cfg: "ModelConfig") -> list[str]:
    """The fused flags on in `cfg`, in FUSED_OPS order."""
    return [flag for flag in FUSED_OPS if getattr(cfg, flag)]


def admissible_fused_flags(cfg: "ModelConfig") -> list[str]:
    """The fused flags a model of `cfg` can have on together, in FUSED_OPS order: each one the
    config's own checks accept beside the ones before it (its record's shape limits, no layer
    function replaced twice, none that competes with cfg's compile_sublayers or fp8_linear).
    With erf GeLU (MLPerf's BERT) that leaves fused_dense_gelu out; below hidden size 1024 the
    LayerNorm and embedding kernels. The one rule of every tool that turns "all fused" on."""
    off = dataclasses.replace(cfg, **{flag: False for flag in FUSED_OPS})
    flags: list[str] = []
    for flag in FUSED_OPS:
        try:  # replace() validates: ModelConfig's checks decide
            dataclasses.replace(off, **{f: True for f in [*flags, flag]})
        except ValueError:  # ConfigError
            continue
        flags.append(flag)
    return flags


def layer_functions(cfg: "ModelConfig") -> "LayerFunctions":
    """The functions the layers of a model with `cfg` call, picked once per model: each flag's
    replacements over the references (ModelConfig refuses two flags that replace the same
    function). A block with functions of its own (model.fp8_linear's encoder GEMMs, which hold
    per-GEMM state) re-binds them over these (`LayerFunctions.with_own`)."""
    from bert.model.layer_functions import pick_layer_functions

    replacements: dict[str, Callable] = {}
    for flag in enabled(cfg):
        replacements.update({name: load(fn) for name, fn in FUSED_OPS[flag].replaces.items()})
    return pick_layer_functions(replacements)


def require_fused_kernels(cfg: "ModelConfig", device: "torch.device | str") -> None:
    """On CUDA, fail now, with the build hint, for every fused kernel `cfg` asks for that this
    process cannot load (rather than at the first step). On the CPU their PyTorch twins run."""
    import torch  # the model is being built: torch is loaded already

    import kernels

    if torch.device(device).type != "cuda":
        return
    for flag in enabled(cfg):
        try:
            kernels.require(FUSED_OPS[flag].kernel)
        except RuntimeError as err:
            raise RuntimeError(f"model.{flag}=true: {err}") from err
