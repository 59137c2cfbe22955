"""model.fp8_linear (bert/model/fp8.py) against an emulated-FP8 oracle and against fp32 math.

The oracle casts each operand to float8 and back with explicit scales and multiplies in fp64:
the FP8 GEMM must match it up to fp32 accumulation (the same quantization, so a tight bound),
and must differ from unquantized math by no more than the formats' rounding allows. Both bounds
are derived below, and each comparison is shown to fail on a wrong scale. The GPU test (-m gpu)
runs the same comparisons on CUDA's torch._scaled_mm in bf16.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bert.core.errors import ConfigError
from bert.model import fp8
from bert.model.config import ModelConfig
from bert.model.fp8 import E4M3, E5M2, Fp8Linear, Recipe
from bert.model.modeling import BertForPretraining
from bert.optim import LAMB, param_groups
from data.packing import pack_samples
from data.synthetic_language import generate_samples, successor_table
from gpu_gate import require_cuda
from small_model import small_config

U32 = 2.0**-24  # fp32's unit roundoff


# ---- the oracle ------------------------------------------------------------------------------
def oracle_scale(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Current scaling, computed the way the module does (fp32), so both round t * s alike."""
    return torch.finfo(dtype).max / t.detach().abs().amax().float()


def emulate(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t rounded to `dtype` at `scale` (beyond its max: clamped) and back, in fp64."""
    top = torch.finfo(dtype).max
    return (t.detach().float() * scale).clamp(-top, top).to(dtype).double() / scale.double()


def oracle(x, w, b, g, scales, grad_dtype=E5M2):
    """y, dx, dw, db of F.linear with FP8 operands (scales: x, w, grad), in fp64; also the
    rounded operands, for the bounds."""
    xq, wq = emulate(x, scales[0], E4M3), emulate(w, scales[1], E4M3)
    gq = emulate(g, scales[2], grad_dtype)
    y = xq @ wq.T + (0 if b is None else b.double())
    return (y, gq @ wq, gq.T @ xq, g.double().sum(0)), (xq, wq, gq)


def accumulation_bound(a: torch.Tensor, b: torch.Tensor, unit: float = U32) -> torch.Tensor:
    """|fl(a @ b) - a @ b| for a GEMM of exactly representable products (FP8 x FP8 fits fp32):
    K additions in `unit` (the standard gamma_K bound) plus the two dequantizing multiplies and
    the output rounding: (K + 3) * unit * (|a| @ |b|)."""
    return (a.shape[1] + 3) * unit * (a.abs() @ b.abs())


def rounding_error(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element, the most rounding to `dtype` at `scale` can move t: half an ulp, 2^-(m+1)
    relative for normals (m mantissa bits: e4m3 3, e5m2 2), half the subnormal spacing in
    absolute terms below (e4m3: 2^-10, e5m2: 2^-17), both in t's units (divided by scale)."""
    info = torch.finfo(dtype)
    mantissa = {E4M3: 3, E5M2: 2}[dtype]
    subnormal_half_step = info.smallest_normal * 2.0**-mantissa / 2
    return t.detach().abs().double() * 2.0 ** -(mantissa + 1) + subnormal_half_step / scale.double()


def product_bound(a, ea, b, eb) -> torch.Tensor:
    """|q(a) @ q(b) - a @ b| for |q(a) - a| <= ea, |q(b) - b| <= eb elementwise:
    q(a)q(b) - ab = da b + a db + da db."""
    return ea @ b.abs().double() + a.abs().double() @ eb + ea @ eb


def assert_within(got: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str):
    error = (got.double() - expected.double()).abs()
    worst = (error - bound).max().item()
    assert worst <= 0, f"{what}: error exceeds its bound by {worst:.3g}"


# ---- the cases ---------------------------------------------------------------------------------
def operands(tokens=37, inputs=64, outputs=48, seed=0, x_scale=1.0):
    """x (T, in), BERT-initialized w (out, in), b (out,), an output gradient g (T, out) of a
    typical size (1e-3). T odd: the weight gradient's padding to 16 tokens is exercised."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(tokens, inputs, generator=gen) * x_scale).requires_grad_()
    w = (torch.randn(outputs, inputs, generator=gen) * 0.02).requires_grad_()
    b = (torch.randn(outputs, generator=gen) * 0.1).requires_grad_()
    g = torch.randn(tokens, outputs, generator=gen) * 1e-3
    return x, w, b, g


def run_fp8(x, w, b, g, recipe=Recipe(scaling="current"), module=None):
    """y, dx, dw, db of one Fp8Linear forward and backward."""
    module = module if module is not None else Fp8Linear(recipe).train()
    for t in (x, w, b):
        if t is not None:
            t.grad = None
    y = module(x, w, b)
    y.backward(g)
    return y, x.grad, w.grad, None if b is None else b.grad


def check_against_oracle(got, x, w, b, g, scales, grad_dtype=E5M2) -> None:
    """Every output of the FP8 GEMM within fp32 accumulation of the oracle's."""
    (y, dx, dw, db), (xq, wq, gq) = oracle(x, w, b, g, scales, grad_dtype)
    assert_within(got[0], y, accumulation_bound(xq, wq.T), "forward")
    assert_within(got[1], dx, accumulation_bound(gq, wq), "data gradient")
    assert_within(got[2], dw, accumulation_bound(gq.T, xq), "weight gradient")
    if b is not None:
        assert_within(got[3], db, g.shape[0] * U32 * g.abs().double().sum(0), "bias gradient")


def current_scales(x, w, g, grad_dtype=E5M2):
    return oracle_scale(x, E4M3), oracle_scale(w, E4M3), oracle_scale(g, grad_dtype)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("tokens", [1, 16, 37])
@pytest.mark.parametrize("grad_dtype", [E5M2, E4M3])
def test_gemm_and_every_gradient_match_the_oracle(with_bias, tokens, grad_dtype):
    x, w, b, g = operands(tokens)
    b = b if with_bias else None
    got = run_fp8(x, w, b, g, Recipe(scaling="current", grad=grad_dtype))
    check_against_oracle(got, x, w, b, g, current_scales(x, w, g, grad_dtype), grad_dtype)


@pytest.mark.parametrize("wrong", ["scale_off_by_2", "no_dequantization"])
def test_the_oracle_comparison_fails_on_a_wrong_scale(monkeypatch, wrong):
    """A dequantization factor twice too large, or none at all: the check must fail."""
    real = fp8.dequant_factor
    if wrong == "scale_off_by_2":
        monkeypatch.setattr(fp8, "dequant_factor", lambda s, amax: 2 * real(s, amax))
    else:
        monkeypatch.setattr(fp8, "dequant_factor", lambda s, amax: torch.ones_like(s))
    x, w, b, g = operands()
    got = run_fp8(x, w, b, g)
    with pytest.raises(AssertionError, match="exceeds its bound"):
        check_against_oracle(got, x, w, b, g, current_scales(x, w, g))


@pytest.mark.parametrize("x_scale", [1.0, 30.0])
def test_error_against_fp32_is_within_fp8_rounding(x_scale):
    """Against unquantized fp64 math: each operand moves by at most its rounding_error, so each
    output by at most product_bound, plus fp32 accumulation. The error is also not zero: the
    path does quantize."""
    x, w, b, g = operands(x_scale=x_scale)
    got = run_fp8(x, w, b, g)
    sx, sw, sg = current_scales(x, w, g)
    xd, wd, gd = (t.detach().double() for t in (x, w, g))
    ex, ew, eg = (
        rounding_error(x, sx, E4M3),
        rounding_error(w, sw, E4M3),
        rounding_error(g, sg, E5M2),
    )
    exact = (xd @ wd.T + b.detach().double(), gd @ wd, gd.T @ xd)
    bounds = (
        product_bound(xd, ex, wd.T, ew.T) + accumulation_bound(xd + ex, (wd + ew).T),
        product_bound(gd, eg, wd, ew) + accumulation_bound(gd + eg, wd + ew),
        product_bound(gd.T, eg.T, xd, ex) + accumulation_bound((gd + eg).T, xd + ex),
    )
    for name, value, reference, bound in zip(("forward", "dx", "dw"), got, exact, bounds):
        assert_within(value, reference, bound, name)
        assert (value.double() - reference).abs().max() > 0, name


def test_the_fp32_bound_fails_without_the_scale():
    """The rounding bound is tight enough to catch a GEMM that skipped its dequantization."""
    x, w, b, g = operands()
    sx, sw = oracle_scale(x, E4M3), oracle_scale(w, E4M3)
    wrong = emulate(x, sx, E4M3) @ emulate(w, sw, E4M3).T * sx.double()  # forgot 1/sx
    xd, wd = x.detach().double(), w.detach().double()
    bound = product_bound(xd, rounding_error(x, sx, E4M3), wd.T, rounding_error(w, sw, E4M3).T)
    with pytest.raises(AssertionError, match="exceeds its bound"):
        assert_within(wrong, xd @ wd.T, bound, "forward")


# ---- scaling and saturation ----------------------------------------------------------------
def test_quantize_saturates_to_the_largest_finite_value():
    big = torch.tensor([1e6, -1e6, 500.0, 1.0])
    one = torch.tensor(1.0)
    assert fp8.quantize(big, one, E4M3).float().tolist() == [448, -448, 448, 1]
    assert fp8.quantize(big * 1e3, one, E5M2).float().tolist() == [57344, -57344, 57344, 1024]


def test_delayed_scaling_history():
    """First call: no history, the current amax scales. Then the largest amax of the history
    (before this call) scales, so a tensor 3x larger saturates at 448 instead of overflowing;
    the history rolls, keeps `history` entries, and eval calls do not add to it."""
    recipe = Recipe(scaling="delayed", history=3)
    module = Fp8Linear(recipe).train()
    x, w, b, g = operands()
    got = run_fp8(x, w, b, g, module=module)
    check_against_oracle(got, x, w, b, g, current_scales(x, w, g))
    amax = [x.abs().max(), w.abs().max(), g.abs().max()]
    torch.testing.assert_close(module.amax_history[:, 0], torch.stack(amax).detach())

    x3 = (x.detach() * 3).requires_grad_()
    got = run_fp8(x3, w, b, g, module=module)  # x's scale from the first call's amax
    assert all(torch.isfinite(t).all() for t in got)
    scales = (oracle_scale(x, E4M3), oracle_scale(w, E4M3), oracle_scale(g, E5M2))
    check_against_oracle(got, x3, w, b, g, scales)
    torch.testing.assert_close(module.amax_history[fp8.X, :2], torch.stack([3 * amax[0], amax[0]]))

    for _ in range(3):
        run_fp8(x, w, b, g, module=module)
    assert module.amax_history[fp8.X].tolist() == [amax[0].item()] * 3  # 3 * amax rolled out

    module.eval()
    before = module.amax_history.clone()
    with torch.no_grad():
        module(x3, w, b)
    assert torch.equal(module.amax_history, before)


def test_an_overflow_reaches_the_output_and_stays_out_of_the_history():
    """An inf in the gradient (an fp16 overflow) gives NaN gradients, which the loss scaler
    sees; the clamp must not hide it, and later scales must not depend on it."""
    module = Fp8Linear(Recipe(scaling="delayed")).train()
    x, w, b, g = operands()
    run_fp8(x, w, b, g, module=module)
    g = g.clone()
    g[3, 5] = float("inf")
    _, dx, dw, _ = run_fp8(x, w, b, g, module=module)
    assert dx.isnan().any() and dw.isnan().any()
    assert module.amax_history.isfinite().all() and module.amax_history[fp8.GRAD, 0] == 0


def test_output_dtype_follows_autocast():
    x, w, b, g = operands(tokens=32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = Fp8Linear(Recipe()).train()(x, w, b)
    assert y.dtype == torch.bfloat16
    y.backward(g.bfloat16())
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == torch.float32


def test_cpu_emulation_is_torch_scaled_mm():
    """The CPU path's fp32 emulation against torch's own (slow) CPU _scaled_mm, bias included:
    equal up to fp32 summation order (twice the accumulation bound: two fp32 GEMMs)."""
    x, w, b, g = (t.detach() for t in operands(tokens=37))
    sx, sw, _ = current_scales(x, w, g)
    x8, w8, fx, fw = fp8.quantize(x, sx, E4M3), fp8.quantize(w, sw, E4M3), 1 / sx, 1 / sw
    got = fp8.scaled_mm(x8, w8.t(), fx, fw, torch.float32, b)
    real = torch._scaled_mm(x8, w8.t(), fx, fw, bias=b, out_dtype=torch.float32)
    bound = 2 * accumulation_bound(x8.double() * fx, w8.double().T * fw) + U32 * b.abs()
    assert_within(got, real, bound, "emulation")


# ---- the model -------------------------------------------------------------------------------
VOCAB, MAX_LEN = 208, 64


def tiny_config(**overrides) -> ModelConfig:
    return small_config(VOCAB, MAX_LEN, **overrides)


def batches(count: int, size: int = 8, **pack_options):
    rng = np.random.default_rng(0)
    samples = generate_samples(rng, successor_table(0, VOCAB), size * count, MAX_LEN, 9)
    return [
        pack_samples(samples[i * size : (i + 1) * size], **pack_options).to("cpu")
        for i in range(count)
    ]


def train(model: BertForPretraining, batch, autocast_dtype=None) -> list[float]:
    """The losses of STEPS LAMB steps on one batch (fast to learn, so the losses move)."""
    optimizer = LAMB(param_groups(model, 0.01), lr=2e-2)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            mlm, nsp = model.loss(*model(batch), batch)
        (mlm + nsp).backward()
        optimizer.step()
        losses.append((mlm + nsp).item())
    return losses


def reference_and_fp8(**overrides):
    torch.manual_seed(0)
    reference = BertForPretraining(tiny_config(**overrides)).train()
    quantized = BertForPretraining(tiny_config(fp8_linear=True, **overrides)).train()
    quantized.load_state_dict(reference.state_dict())  # same checkpoint keys with the flag on
    return reference, quantized


STEPS = 4
# FP8's unit roundoff over bf16's: e5m2 gradients 2^-3 against 2^-8 (e4m3 operands: 2^-4).
FP8_OVER_BF16 = 2.0**-3 / 2.0**-8


def loss_bound(reference: BertForPretraining, batch, fp32_losses: list[float]) -> float:
    """Twice PyTorch's own low-precision error scaled to FP8's rounding: the reference model
    under bf16 autocast (which rounds these GEMMs' operands, and more, to bf16) departs from
    fp32 by some amount; FP8 rounds the same operands 32x more coarsely at most."""
    bf16 = train(copy.deepcopy(reference), batch, torch.bfloat16)
    return 2 * FP8_OVER_BF16 * max(abs(a - b) for a, b in zip(bf16, fp32_losses))


def assert_close_losses(got: list[float], expected: list[float], bound: float) -> None:
    for step, (a, b) in enumerate(zip(got, expected)):
        assert abs(a - b) <= bound, f"step {step}: fp8 loss {a:.5f}, reference {b:.5f}"


@pytest.mark.parametrize("subset", [False, True], ids=["all_tokens", "last_layer_subset"])
@pytest.mark.parametrize("scaling", ["delayed", "current"])
def test_fp8_model_trains_like_the_reference(subset, scaling):
    reference, quantized = reference_and_fp8(last_layer_subset=subset, fp8_scaling=scaling)
    batch = batches(1, **quantized.pack_options())[0]
    initial = copy.deepcopy(reference)
    expected, got = train(reference, batch), train(quantized, batch)
    bound = loss_bound(initial, batch, expected)
    assert all(np.isfinite(got))
    assert expected[0] - expected[-1] > 10 * bound  # it learns, far beyond the bound
    assert_close_losses(got, expected, bound)
    assert got != expected  # the FP8 path ran


def test_the_loss_comparison_fails_when_fp8_is_wrong(monkeypatch):
    real = fp8.dequant_factor
    monkeypatch.setattr(fp8, "dequant_factor", lambda s, amax: 2 * real(s, amax))
    reference, quantized = reference_and_fp8()
    batch = batches(1)[0]
    initial = copy.deepcopy(reference)
    expected, got = train(reference, batch), train(quantized, batch)
    with pytest.raises(AssertionError, match="fp8 loss"):
        assert_close_losses(got, expected, loss_bound(initial, batch, expected))


def test_only_the_encoder_gemms_are_fp8(monkeypatch):
    """Per layer 4 FP8 GEMM calls (QKV, attention output, FFN in and out), each with 3 FP8
    GEMMs (forward, data and weight gradient); the MLM transform, decoder, pooler and NSP stay
    F.linear."""
    gemms = []
    real = fp8.scaled_mm
    monkeypatch.setattr(fp8, "scaled_mm", lambda *args: gemms.append(1) or real(*args))
    _, quantized = reference_and_fp8()
    weights = []
    for module in quantized.modules():
        if isinstance(module, Fp8Linear):
            module.register_forward_hook(lambda m, args, out: weights.append(tuple(args[1].shape)))
    batch = batches(1)[0]
    mlm, nsp = quantized.loss(*quantized(batch), batch)
    (mlm + nsp).backward()
    hidden, inner, layers = 64, 128, quantized.config.num_hidden_layers
    expected = [(3 * hidden, hidden), (hidden, hidden), (inner, hidden), (hidden, inner)]
    assert sorted(weights) == sorted(expected * layers)
    assert len(gemms) == 3 * len(weights)
    assert quantized.heads.linear is F.linear
    assert quantized.heads.linear_gelu.__name__ == "linear_gelu"


def test_flag_off_leaves_the_model_as_it_was():
    """Off: no FP8 modules, no buffers, the reference layer functions, and the same training
    pass bit for bit as a model built before the flag existed would run (F.linear)."""
    torch.manual_seed(0)
    model = BertForPretraining(tiny_config()).train()
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())
    assert list(model.buffers()) == []
    layer = model.layers[0]
    assert layer.attention.linear is F.linear
    assert layer.attention.linear_with_residual.__name__ == "linear_with_residual"
    assert layer.ffn.sublayer.__name__ == "feed_forward"
    _, quantized = reference_and_fp8()
    assert quantized.state_dict().keys() == model.state_dict().keys()


def test_fp8_training_step_reads_nothing_back(monkeypatch):
    """tests/unit/test_sync_free.py's CPU proxy: the scales come from device values without a
    host read (the first step, which allocates the optimizer state, runs unguarded)."""
    _, quantized = reference_and_fp8()
    batch = batches(1)[0]
    optimizer = LAMB(param_groups(quantized, 0.01), lr=2e-2)

    def step():
        optimizer.zero_grad(set_to_none=True)
        mlm, nsp = quantized.loss(*quantized(batch), batch)
        (mlm + nsp).backward()
        optimizer.step()

    step()

    def refuse(*args, **kwargs):
        raise AssertionError("a host read inside the training step")

    for name in ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    step()


# ---- config ----------------------------------------------------------------------------------
def test_fp8_is_off_by_default():
    cfg = ModelConfig()
    assert not cfg.fp8_linear and cfg.fp8_scaling == "delayed"
    assert fp8.FP8_LINEAR_GPU_VALIDATED is None


@pytest.mark.parametrize(
    "overrides,match",
    [
        (dict(hidden_size=72), r"model.hidden_size to be a multiple of 16 .*got 72"),
        (dict(intermediate_size=136), r"model.intermediate_size to be a multiple of 16"),
        (dict(fused_dense=True), r"fp8_linear=true and model.fused_dense=true replace"),
        (dict(fused_dense_gelu=True, hidden_act="gelu_tanh"), r"model.fused_dense_gelu=true"),
        (dict(compile_sublayers=True), r"compile_sublayers=true is not supported"),
    ],
)
def test_config_refuses_what_fp8_cannot_run(overrides, match):
    with pytest.raises(ConfigError, match=match):
        tiny_config(fp8_linear=True, **overrides)
    tiny_config(**overrides)  # each is fine without FP8


def test_fp8_runs_with_the_fusions_outside_its_gemms():
    """The fused sublayer end adds the bias itself: the FP8 GEMM then runs without one."""
    flags = dict(fused_bias_dropout_residual_layernorm=True, fused_mlm_loss=True)
    cfg = tiny_config(
        hidden_size=1024, num_attention_heads=16, num_hidden_layers=1, fp8_linear=True, **flags
    )
    model = BertForPretraining(cfg).train()
    batch = batches(1, size=2)[0]
    mlm, nsp = model.loss(*model(batch), batch)
    (mlm + nsp).backward()
    assert torch.isfinite(mlm + nsp)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_cuda_needs_sm89_and_16_bit_activations(monkeypatch):
    """Without a GPU: the capability check with a faked device, the precision check in the
    config."""
    from bert.config import load_config

    cfg = tiny_config(fp8_linear=True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(RuntimeError, match="compute capability 8.9 or newer .*got 8.0"):
        fp8.require_device(cfg, "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    fp8.require_device(cfg, "cuda")
    fp8.require_device(cfg, "cpu")
    with pytest.raises(ConfigError, match="fp8_linear=true needs run.precision=bf16 or fp16"):
        load_config(None, ["model.fp8_linear=true", "run.device=cuda", "run.precision=fp32"])


def test_gpu_status_names_fp8():
    from bert import gpu_status
    from bert.config import load_config

    cfg = load_config(None, ["model.fp8_linear=true"])
    assert gpu_status.unvalidated(cfg) == ["model.fp8_linear"]


# ---- GPU -------------------------------------------------------------------------------------
# Hopper's FP8 tensor cores accumulate with fewer bits than fp32 (about 14 retained, DeepSeek-V3
# report sec. 3.3.2); the GPU bounds use that unit instead of fp32's.
HOPPER_ACCUMULATION = 2.0**-14


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 37, 4096])
def test_cuda_scaled_mm_matches_the_oracle(tokens):
    """torch._scaled_mm on CUDA, bf16 under autocast as in training, against the oracle:
    accumulation in Hopper's unit plus the bf16 output rounding (2^-9 relative)."""
    require_cuda()
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 GEMMs need compute capability 8.9+")
    x, w, b, g = (t.detach().cuda() for t in operands(tokens, 1024, 3072))
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    g = g.bfloat16()  # the gradient autocast's bf16 output receives
    module = Fp8Linear(Recipe(scaling="current")).cuda().train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = module(x, w, b)
    y.backward(g)
    g = g.float()
    (ey, edx, edw, _), (xq, wq, gq) = oracle(x, w, b, g, current_scales(x, w, g))
    bias_rounding = 2.0**-9 * b.detach().double().abs()  # the bias joins the GEMM in bf16
    checks = (
        (y, ey, accumulation_bound(xq, wq.T, HOPPER_ACCUMULATION) + bias_rounding),
        (x.grad, edx, accumulation_bound(gq, wq, HOPPER_ACCUMULATION)),
        (w.grad, edw, accumulation_bound(gq.T, xq, HOPPER_ACCUMULATION)),
    )
    for (value, expected, bound), name in zip(checks, ("forward", "dx", "dw")):
        assert_within(value, expected, bound + 2.0**-9 * expected.abs(), name)


@pytest.mark.gpu
def test_cuda_fp8_model_trains_without_syncs():
    """bf16 autocast on CUDA, as in training: the FP8 model's losses within the same bound of
    the reference's (its bf16 error against fp32 taken on the CPU), and no step after the first
    syncs with the host."""
    require_cuda()
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 GEMMs need compute capability 8.9+")
    reference, quantized = reference_and_fp8()
    batch = batches(1)[0]
    bound = loss_bound(copy.deepcopy(reference), batch, train(copy.deepcopy(reference), batch))
    losses = [cuda_losses(model.cuda(), batch.to("cuda")) for model in (reference, quantized)]
    assert all(np.isfinite(losses[1]))
    assert_close_losses(losses[1], losses[0], bound)


def cuda_losses(model: BertForPretraining, batch) -> list[float]:
    optimizer = LAMB(param_groups(model, 0.01), lr=2e-2)
    losses = []
    for step in range(STEPS):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error" if step else "default")  # step 0 allocates
        try:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                mlm, nsp = model.loss(*model(batch), batch)
            (mlm + nsp).backward()
            optimizer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        losses.append((mlm + nsp).detach())
    return [loss.item() for loss in losses]
