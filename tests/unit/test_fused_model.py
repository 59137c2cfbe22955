"""The model with the fused kernels (model.fused_* flags) against the reference model.

On the CPU the custom ops run their PyTorch twins (kernels/reference.py, reference_dense.py), so
the CPU tests check the wiring: each flag calls its op (and only its op), the dense flags at
every site they claim, the parameter names do not change, and with dropout off the losses and
every gradient equal the reference model's. With dropout on, the fused sublayers draw
kernels.reference's Philox masks, and the model equals the reference composition under those
masks. The GPU test (-m gpu) is the fused model's acceptance test in fp16 and bf16 against
PyTorch's own low-precision error.

fused_dense_gelu needs hidden_act=gelu_tanh (cuBLASLt's GeLU), so every case with it runs both
models with the tanh GeLU; the others keep BERT's erf GeLU.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_gate import require_kernels
from small_model import masked_sample, small_config
import kernels
from bert.model import fused as ops
from bert.config import ConfigError
from bert.model.config import FUSED_HIDDEN_SIZE, ModelConfig
from bert.model import BertForPretraining, FeedForward
from data.packing import PackedBatch, pack_samples
from kernels.reference import HIDDEN, dropout_keep_mask, unpack_dropout_mask
from kernels.softmax_cross_entropy import softmax_cross_entropy

FLAGS = (
    "fused_bias_dropout_residual_layernorm",
    "fused_embedding_backward",
    "fused_mlm_loss",
    "fused_dense",
    "fused_dense_gelu",
)
DENSE_OPS = {"bert_kernels.dense_forward", "bert_kernels.dense_dgrad", "bert_kernels.dense_wgrad"}
# The custom ops (forward and backward) each flag must call.
FLAG_OPS = {
    "fused_bias_dropout_residual_layernorm": {
        "bert_kernels.bdrln_forward",
        "bert_kernels.bdrln_backward",
    },
    "fused_embedding_backward": {"bert_kernels.embedding", "bert_kernels.embedding_backward"},
    "fused_mlm_loss": {
        "bert_kernels.softmax_cross_entropy",
        "bert_kernels.softmax_cross_entropy_backward",
    },
    "fused_dense": DENSE_OPS,
    "fused_dense_gelu": DENSE_OPS,
}
# Every flag an MLPerf (erf GeLU) model may use: all but fused_dense_gelu.
ERF_FLAGS = tuple(flag for flag in FLAGS if flag != "fused_dense_gelu")
DENSE_CASES = [("fused_dense",), ("fused_dense_gelu",), ("fused_dense", "fused_dense_gelu")]
CASES = [(flag,) for flag in FLAGS] + [DENSE_CASES[2], ERF_FLAGS, FLAGS]
VOCAB = 203  # padded to 208: the padding columns must stay out of the softmax
LENGTHS = (1, 13, 64, 2, 31)  # length 1, primes, the maximum


def case_id(flags) -> str:
    return "+".join(flag[6:] for flag in flags)


def activation(flags) -> str:
    """The GeLU of a case: tanh with fused_dense_gelu (cuBLASLt's), else BERT's erf."""
    return "gelu_tanh" if "fused_dense_gelu" in flags else "gelu"


def config(flags=(), dropout: float = 0.0, **overrides) -> ModelConfig:
    """Two layers at the kernels' hidden size (1024); everything else small."""
    values = dict(vocab_size=VOCAB, hidden_dropout_prob=dropout, hidden_act=activation(flags))
    values.update(overrides)
    flags_on = {flag: True for flag in flags}
    return small_config(max_len=64, hidden=HIDDEN, heads=16, **values, **flags_on)


def make_batch(seed: int = 0, lengths=LENGTHS, vocab: int = VOCAB, **pack_options):
    rng = np.random.default_rng(seed)
    samples = []
    for i, n in enumerate(lengths):
        positions = np.sort(rng.choice(n, size=max(1, n * 15 // 100), replace=False))
        samples.append(masked_sample(rng, n, vocab, positions, i % 2))
    return pack_samples(samples, **pack_options)


GPU_TEST_LENGTHS = (1, 7, 128, 509, 512, 300, 33, 256)
GPU_TEST_ATTENTIONS = ("padded_sdpa", "grouped_flash")


def gpu_test_batch(model: BertForPretraining) -> PackedBatch:
    """The GPU test's batch, with the host metadata `model` reads (grouped_flash: the length
    groups), as the data pipeline builds it from `model.pack_options()`."""
    return make_batch(3, GPU_TEST_LENGTHS, 30522, **model.pack_options())


class OpRecorder(TorchDispatchMode):
    """Records every op that reaches the dispatcher, with its arguments and outputs (custom ops
    included)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, tuple, object]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func.name().split(".")[0].replace("::", "."), args, out))
        return out

    def names(self) -> set[str]:
        return {name for name, _, _ in self.calls}

    def inputs(self, name: str) -> list[tuple]:
        return [args for op, args, _ in self.calls if op == name]

    def outputs(self, name: str) -> list:
        return [out for op, _, out in self.calls if op == name]


def dense_sites(recorder: OpRecorder) -> dict[str, int]:
    """How many GEMMs of one training pass ran each cuBLASLt epilogue."""
    forward = recorder.inputs("bert_kernels.dense_forward")  # (x, weight, bias, gelu)
    dgrad = recorder.inputs("bert_kernels.dense_dgrad")  # (grad_y, weight, residual, gelu_pre)
    return {
        "bias": sum(not args[3] for args in forward),
        "bias_gelu": sum(bool(args[3]) for args in forward),
        "dgrad_residual": sum(args[2] is not None for args in dgrad),
        "dgrad_gelu": sum(args[3] is not None for args in dgrad),
    }


def expected_dense_sites(flags, layers: int) -> dict[str, int]:
    """Per layer: fused_dense takes QKV (its dgrad adds the residual) and the attention output;
    the FFN goes to fused_dense_gelu when it is on (GEMM + GeLU, GEMM; one dgrad with GeLU',
    one with the residual), else to fused_dense (two GEMMs, the first's dgrad with the
    residual). Heads: the MLM transform like the FFN's first GEMM; decoder and pooler with
    fused_dense; NSP (2 outputs) never."""
    dense, gelu = "fused_dense" in flags, "fused_dense_gelu" in flags
    sites = dict.fromkeys(("bias", "bias_gelu", "dgrad_residual", "dgrad_gelu"), 0)
    if dense:
        sites["bias"] += 2 * layers + 2
        sites["dgrad_residual"] += layers
    if gelu:
        sites["bias"] += layers
        sites["bias_gelu"] += layers + 1
        sites["dgrad_residual"] += layers
        sites["dgrad_gelu"] += layers
    elif dense:
        sites["bias"] += 2 * layers + 1
        sites["dgrad_residual"] += layers
    return sites


def train_pass(model: BertForPretraining, batch):
    """Loss (MLM + NSP, the model's own loss path) and {name: grad} of one forward and
    backward."""
    model.zero_grad(set_to_none=True)
    mlm, nsp = model.loss(*model(batch), batch)
    loss = mlm + nsp
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def assert_same_training_pass(got, expected) -> None:
    (loss, grads), (ref_loss, ref_grads) = got, expected
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def reference_and_fused(flags, dropout: float = 0.0):
    """The reference model (same GeLU as the case) and the fused one with its weights."""
    torch.manual_seed(0)
    reference = BertForPretraining(config(dropout=dropout, hidden_act=activation(flags))).train()
    fused = BertForPretraining(config(flags, dropout=dropout)).train()
    fused.load_state_dict(reference.state_dict())
    return reference, fused


# ---- configuration -----------------------------------------------------------------------------
def test_fused_flags_are_off_by_default():
    assert not any(getattr(ModelConfig(), flag) for flag in FLAGS)
    assert FUSED_HIDDEN_SIZE == HIDDEN
    assert set(ops.FUSED_KERNELS) == set(FLAGS) and set(ops.FUSED_KERNELS.values()) <= set(
        kernels.OPS
    )


@pytest.mark.parametrize("flag", FLAGS[:2])
def test_hidden_size_kernels_refuse_other_sizes(flag):
    with pytest.raises(ConfigError, match=f"model.{flag}=true needs model.hidden_size=1024"):
        config((flag,), hidden_size=768, num_attention_heads=12)
    config(("fused_mlm_loss",), hidden_size=768, num_attention_heads=12)  # any hidden size


def test_fused_mlm_loss_needs_a_vocabulary_padded_to_8():
    with pytest.raises(ConfigError, match="fused_mlm_loss=true needs the padded vocabulary"):
        config(("fused_mlm_loss",), pad_vocab_to_multiple_of=1)
    config(("fused_mlm_loss",), vocab_size=208, pad_vocab_to_multiple_of=1)


def test_fused_dense_gelu_needs_the_tanh_gelu():
    with pytest.raises(
        ConfigError,
        match=r"fused_dense_gelu=true needs model\.hidden_act="
        r"gelu_tanh .*got 'gelu'.*use model\.fused_dense",
    ):
        config(("fused_dense_gelu",), hidden_act="gelu")
    config(("fused_dense",), hidden_act="gelu")  # no GeLU in its epilogues: either form


@pytest.mark.parametrize("flag", DENSE_CASES[2])
@pytest.mark.parametrize(
    "name, overrides",
    [
        ("hidden_size", dict(hidden_size=1020, num_attention_heads=12)),
        ("intermediate_size", dict(intermediate_size=130)),
    ],
)
def test_dense_flags_need_features_multiple_of_8(flag, name, overrides):
    with pytest.raises(
        ConfigError,
        match=f"model.{flag}=true needs model.{name} to be a "
        f"multiple of 8.*got {next(iter(overrides.values()))}",
    ):
        config((flag,), **overrides)
    config((flag,), hidden_size=768, num_attention_heads=12)  # any multiple of 8


def test_fused_dense_needs_a_vocabulary_padded_to_8():
    """The decoder's output features are the padded vocabulary; fused_dense_gelu has no decoder."""
    with pytest.raises(
        ConfigError,
        match=r"fused_dense=true needs the padded vocabulary \(the "
        r"MLM decoder's output features\).*got 203",
    ):
        config(("fused_dense",), pad_vocab_to_multiple_of=1)
    config(("fused_dense_gelu",), pad_vocab_to_multiple_of=1)


def test_missing_extension_fails_at_model_build_on_cuda():
    """Only a CUDA model needs the build: the CPU twins need nothing, nor does a config with no
    fused flag. Checked without a GPU: the check loads the library, it never touches a device."""
    if kernels.available():
        pytest.skip("the CUDA extension loads in this process")
    with pytest.raises(
        RuntimeError,
        match=r"model\.fused_bias_dropout_residual_layernorm=true: "
        r".*python -m kernels\.build",
    ):
        BertForPretraining(config(FLAGS), device="cuda")
    with pytest.raises(RuntimeError, match=r"model\.fused_mlm_loss=true"):
        BertForPretraining(config(("fused_mlm_loss",)), device=torch.device("cuda", 0))
    for flag in DENSE_CASES[2]:
        with pytest.raises(RuntimeError, match=rf"model\.{flag}=true: .*python -m kernels\.build"):
            BertForPretraining(config((flag,)), device="cuda")
    BertForPretraining(config(FLAGS), device="cpu")
    BertForPretraining(config(), device="cuda")


# ---- dropout off: the same model ---------------------------------------------------------------
@pytest.mark.parametrize("flags", CASES, ids=case_id)
def test_fused_model_matches_reference(flags):
    """Same parameter names; each flag calls its ops and no other flag's, the dense flags at
    every site (their residual fusion included); losses and every gradient equal the reference
    model's (fp32, dropout off, training mode)."""
    reference, fused = reference_and_fused(flags)
    assert [(k, v.shape) for k, v in fused.state_dict().items()] == [
        (k, v.shape) for k, v in reference.state_dict().items()
    ]
    batch = make_batch().to("cpu")
    expected = train_pass(reference, batch)
    with OpRecorder() as recorder:
        got = train_pass(fused, batch)
    called = {name for name in recorder.names() if name.startswith("bert_kernels.")}
    assert called == set().union(*(FLAG_OPS[flag] for flag in flags))
    assert dense_sites(recorder) == expected_dense_sites(flags, len(fused.layers))
    assert_same_training_pass(got, expected)


def test_eval_mode_fused_model_matches_reference():
    """Eval switches the fused sublayers' dropout off, as nn.Dropout does (dropout 0.1 here)."""
    reference, fused = reference_and_fused(FLAGS, dropout=0.1)
    batch = make_batch(1).to("cpu")
    with torch.no_grad():
        expected = reference.eval()(batch)
        got = fused.eval()(batch)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


# ---- dropout on: the Philox mask and the reference composition under it -----------------------
class ReplayDropout(nn.Module):
    """nn.Dropout with a given keep mask (T, hidden) instead of a drawn one."""

    def __init__(self, keep: torch.Tensor, p: float):
        super().__init__()
        self.keep, self.p = keep, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.keep.to(x.dtype) * (1.0 / (1.0 - self.p))


@pytest.mark.parametrize(
    "flags",
    [
        ("fused_bias_dropout_residual_layernorm",),
        ("fused_bias_dropout_residual_layernorm", *DENSE_CASES[2]),
    ],
    ids=case_id,
)
def test_fused_dropout_model_is_the_composition_under_its_masks(flags):
    """Dropout 0.1: record the keep mask of every fused sublayer; the reference model with those
    masks in its sublayer dropouts gives the same loss and gradients. The embeddings' dropout
    (not fused) is torch's in both models: the same seed draws the same mask. With the dense
    flags, the GEMMs hand the fused end their output without the bias."""
    p = 0.1
    reference, fused = reference_and_fused(flags, p)
    batch = make_batch(2).to("cpu")
    torch.manual_seed(5)
    with OpRecorder() as recorder:
        got = train_pass(fused, batch)
    masks = [unpack_dropout_mask(out[4]) for out in recorder.outputs("bert_kernels.bdrln_forward")]
    assert len(masks) == 2 * len(fused.layers)  # attention, then feed-forward, per layer
    dropped = 1.0 - torch.stack(masks).float().mean().item()
    assert abs(dropped - p) < 0.01, dropped
    for i, layer in enumerate(reference.layers):
        layer.attention.dropout = ReplayDropout(masks[2 * i], p)
        layer.ffn.dropout = ReplayDropout(masks[2 * i + 1], p)
    torch.manual_seed(5)
    assert_same_training_pass(got, train_pass(reference, batch))


@pytest.mark.parametrize("flags", DENSE_CASES, ids=case_id)
def test_dense_flags_keep_torch_dropout(flags):
    """Without the fused LayerNorm, the dense flags leave dropout to nn.Dropout, drawn in the
    same order on the same shapes: with dropout 0.1 and the same seed the model equals the
    reference (dropout 0 would not see a bias moved to the wrong side of the dropout)."""
    reference, fused = reference_and_fused(flags, dropout=0.1)
    batch = make_batch(4).to("cpu")
    torch.manual_seed(7)
    expected = train_pass(reference, batch)
    torch.manual_seed(7)
    assert_same_training_pass(train_pass(fused, batch), expected)


def test_fused_sublayer_mask_is_the_reference_philox_mask():
    """The mask a fused sublayer draws is kernels.reference.dropout_keep_mask for the Philox key
    taken from torch's generator (on the CPU the twin draws it with torch.randint(2**62), offset
    0), so the same seed reproduces it and the GPU kernel's tests pin the same function."""
    p, tokens = 0.25, 37
    cfg = config(("fused_bias_dropout_residual_layernorm",), dropout=p)
    ffn = FeedForward(cfg, ops.layer_functions(cfg)).train()
    x = torch.randn(tokens, HIDDEN)
    torch.manual_seed(11)
    key = int(torch.randint(2**62, ()).item())
    torch.manual_seed(11)
    with OpRecorder() as recorder:
        ffn(x)
    (outputs,) = recorder.outputs("bert_kernels.bdrln_forward")
    assert torch.equal(unpack_dropout_mask(outputs[4]), dropout_keep_mask(tokens, p, key, 0))


# ---- GPU acceptance test -----------------------------------------------------------------------
def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(
        a.float().flatten(), b.float().flatten(), dim=0
    ).item()


def gpu_pass(model, batch, dtype):
    """Logits, per-row MLM losses, the loss and the gradients of one pass under autocast."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        mlm_logits, nsp_logits = model(batch)
    mlm, nsp = model.loss(mlm_logits, nsp_logits, batch)
    (mlm + nsp).backward()
    with torch.no_grad():
        per_row = torch.nn.functional.cross_entropy(
            mlm_logits[:, : model.config.vocab_size].float(), batch.masked_labels, reduction="none"
        )
    grads = {name: p.grad for name, p in model.named_parameters()}
    return {
        "mlm_logits": mlm_logits.detach(),
        "mlm_rows": per_row,
        "loss": (mlm + nsp).detach(),
    }, grads


@pytest.mark.parametrize("attention", GPU_TEST_ATTENTIONS)
def test_gpu_test_batch_feeds_every_attention(attention):
    """On the CPU, the GPU test's batch runs through every attention that test parametrizes
    (2026-11-26 H100 window: the grouped_flash cases died on a batch built without groups)."""
    small = dict(vocab_size=30522, intermediate_size=256, max_position_embeddings=512)
    model = BertForPretraining(config((), attention=attention, **small)).eval()
    batch = gpu_test_batch(model).to("cpu")
    with torch.no_grad():
        mlm_logits, nsp_logits = model(batch)
    assert mlm_logits.shape[0] == batch.masked_labels.numel()
    assert nsp_logits.shape == (len(GPU_TEST_LENGTHS), 2)


@pytest.mark.gpu
@pytest.mark.parametrize("flags", [FLAGS, ERF_FLAGS], ids=["all_gelu_tanh", "erf_gelu"])
@pytest.mark.parametrize("attention", GPU_TEST_ATTENTIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_model_on_gpu(dtype, attention, flags):
    """Every fused flag on (with the tanh GeLU), or every flag but fused_dense_gelu (erf GeLU,
    MLPerf's model), BERT-Large layers (2 of them), dropout off, under autocast: MLM
    logits and per-row MLM losses within 2x PyTorch's own error (the reference model under the
    same autocast, both against the reference in fp32) plus 1e-5 of the magnitude, and the mean
    loss within that of the rows; every gradient with cosine similarity >= 0.999 to the fp32
    one (the NSP path is checked there and in the loss: 16 logits make a brittle max-error
    test). The fused training pass never synchronizes with the host."""
    require_kernels()  # queried at run time, never at collection
    large = dict(vocab_size=30522, intermediate_size=4096, max_position_embeddings=512)
    torch.manual_seed(0)
    reference = BertForPretraining(config(hidden_act=activation(flags), **large)).cuda().train()
    fused_cfg = config(flags, attention=attention, **large)
    fused = BertForPretraining(fused_cfg, device="cuda")
    fused.load_state_dict(reference.state_dict())
    fused.cuda().train()
    batch = gpu_test_batch(fused).to("cuda")

    oracle, oracle_grads = gpu_pass(reference, batch, None)
    torch_lp, torch_grads = gpu_pass(reference, batch, dtype)
    gpu_pass(fused, batch, dtype)  # first pass: library handles, streams, allocations
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got, got_grads = gpu_pass(fused, batch, dtype)
    finally:
        torch.cuda.set_sync_debug_mode("default")

    got["mlm_rows"] = softmax_cross_entropy(
        got["mlm_logits"], batch.masked_labels, 30522, reduction="none"
    )  # the kernel's own rows
    for key in ("mlm_logits", "mlm_rows", "loss"):
        torch_err = max_error(torch_lp[key], oracle[key])
        if key == "loss":  # a mean of rows: bounded by the rows' error, robust to lucky means
            torch_err = max(torch_err, max_error(torch_lp["mlm_rows"], oracle["mlm_rows"]))
        bound = 2 * torch_err + 1e-5 * max(1.0, oracle[key].abs().max().item())
        assert max_error(got[key], oracle[key]) <= bound, (
            key,
            max_error(got[key], oracle[key]),
            bound,
        )
    for name, grad in got_grads.items():
        similarity = cosine(grad, oracle_grads[name])
        assert similarity >= 0.999, (
            name,
            similarity,
            cosine(torch_grads[name], oracle_grads[name]),
        )


# ---- benchmark hook ----------------------------------------------------------------------------
def test_bench_tries_fused_kernels_only_when_asked_on_cuda():
    """scripts/bench_throughput.py: the fused kernels and grouped_flash compete for `fastest`
    only with --include-unvalidated, only on CUDA, and the kernels only at hidden size 1024."""
    from bert.tools.throughput.bench import parse_args
    from bert.tools.throughput.settings import Candidate, fastest_candidates

    def candidates(kind, *argv):
        return fastest_candidates(parse_args(list(argv)), kind)

    assert not any(c.fused for c in candidates("cuda", "--model", "large"))
    assert not any(c.fused for c in candidates("cpu", "--include-unvalidated"))
    assert not any(c.fused for c in candidates("cuda", "--include-unvalidated", "--model", "base"))
    unvalidated = candidates("cuda", "--include-unvalidated", "--model", "large")
    assert Candidate("grouped_flash", fused=True) in unvalidated
    assert Candidate("padded_sdpa", compile=True, fused=True, subset=True) in unvalidated
    # the attention backends validated in the 2026-11-26 H100 window compete without the option
    assert {c.attention for c in candidates("cuda", "--model", "large")} == {
        "padded_sdpa",
        "flash_varlen",
        "grouped_flash",
    }
    assert candidates("cuda", "--fastest", "grouped_flash+fused") == [
        Candidate("grouped_flash", fused=True)
    ]
    assert candidates("cpu", "--fastest", "per_sequence+subset") == [
        Candidate("per_sequence", subset=True)
    ]
    # several named sets compete in one run: the optimizers timed against each other
    assert candidates("cuda", "--fastest", "flash_varlen+fused,flash_varlen+fused+fusedlamb") == [
        Candidate("flash_varlen", fused=True),
        Candidate("flash_varlen", fused=True, optimizer="fusedlamb"),
    ]
    # The last-layer subset is exact, so it always competes, with and without.
    assert {c.subset for c in candidates("cpu")} == {False, True}
    # Compiled sublayers (model.compile_sublayers) compete only when named, never with +fused.
    assert not any(
        c.sublayers for c in candidates("cuda", "--include-unvalidated", "--model", "large")
    )
    assert candidates("cuda", "--fastest", "flash_varlen+sublayers") == [
        Candidate("flash_varlen", sublayers=True)
    ]
    with pytest.raises(SystemExit, match="sublayers compiles what"):
        candidates("cuda", "--fastest", "flash_varlen+fused+sublayers")
    # The optimizer: named only; the sharded one with or without its kernels, not both.
    assert {c.optimizer for c in candidates("cuda", "--include-unvalidated")} == {"lamb"}
    assert (
        candidates("cuda", "--fastest", "flash_varlen+fused+fusedlamb")[0].optimizer == "fusedlamb"
    )
    assert candidates("cpu", "--fastest", "per_sequence+sharded")[0].optimizer == "sharded"
    with pytest.raises(SystemExit, match="fusedlamb is the sharded optimizer"):
        candidates("cuda", "--fastest", "flash_varlen+sharded+fusedlamb")
    with pytest.raises(SystemExit, match="ATTENTION one of"):
        candidates("cuda", "--fastest", "flashy+fused")


def test_one_rule_admits_the_fused_flags():
    """bert/model/fused.py's admissible_fused_flags is the one rule of "every fused flag": the
    config's own checks, flag by flag. The benchmark's BERT has erf GeLU (as MLPerf's), so
    everything but fused_dense_gelu; a tanh-GeLU model gets that one too; a small model only
    the flags without the 1024 limit; compile_sublayers and fp8_linear keep theirs."""
    from bert.model.fused import admissible_fused_flags
    from bert.tools.gpu.train_compare import SHAPES, fused_switches
    from bert.tools.throughput.workload import model_config

    erf, tanh = model_config("large"), ModelConfig(hidden_act="gelu_tanh")
    small = ModelConfig(hidden_size=64, num_attention_heads=2)
    compiled, fp8 = ModelConfig(compile_sublayers=True), ModelConfig(fp8_linear=True)
    assert erf.hidden_act == "gelu" and admissible_fused_flags(erf) == list(ERF_FLAGS)
    assert admissible_fused_flags(tanh) == list(FLAGS)
    assert admissible_fused_flags(small) == ["fused_mlm_loss", "fused_dense"]
    assert admissible_fused_flags(compiled) == ["fused_embedding_backward", "fused_mlm_loss"]
    assert admissible_fused_flags(fp8) == list(ERF_FLAGS[:3])
    for cfg in (erf, tanh, small, compiled, fp8):  # every flag set it picks is a valid config
        dataclasses.replace(cfg, **dict.fromkeys(admissible_fused_flags(cfg), True))
    # the GPU harness's fused run (train_compare, learning_proof) takes the same rule
    assert fused_switches(SHAPES["cuda"], "cpu") == dict.fromkeys(
        (f"model.{flag}" for flag in ERF_FLAGS), "true"
    )  # width 1024, erf GeLU


@pytest.mark.parametrize("flags", [(), ERF_FLAGS], ids=["reference", "fused"])
def test_the_model_picks_its_layer_functions_once(monkeypatch, flags):
    """One pick per model build, handed to every layer (BERT-Large's 24 layers once picked 51
    times: the embeddings, each attention and FFN block, the heads and the loss)."""
    from bert.model import layer_functions

    picks = []
    pick = layer_functions.pick_layer_functions
    monkeypatch.setattr(
        layer_functions, "pick_layer_functions", lambda r: picks.append(1) or pick(r)
    )
    cfg = config(flags, num_hidden_layers=4)  # one pick, however many layers
    model = BertForPretraining(cfg)
    assert len(picks) == 1
    assert {id(layer.ffn.sublayer) for layer in model.layers} == {id(model.layers[0].ffn.sublayer)}
