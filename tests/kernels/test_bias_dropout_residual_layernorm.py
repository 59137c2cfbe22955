"""bias_dropout_residual_layernorm: reference checks (CPU) and the fused kernel (GPU, -m gpu)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from kernel_checks import LOW_PRECISION, TOKEN_COUNTS, assert_within_torch_error, max_error
from kernels import reference as ref
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm

H = ref.HIDDEN
EPS = 1e-12  # BERT's layer_norm_eps
ROOT = Path(__file__).resolve().parents[2]


def make_inputs(tokens, dtype, param_dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    act = [torch.randn(tokens, H, generator=g) for _ in range(2)]
    params = [
        0.1 * torch.randn(H, generator=g),
        1 + 0.1 * torch.randn(H, generator=g),
        0.1 * torch.randn(H, generator=g),
    ]
    act = [t.to(device, dtype).requires_grad_() for t in act]
    params = [t.to(device, param_dtype).requires_grad_() for t in params]
    x, residual = act
    bias, weight, ln_bias = params
    return x, bias, residual, weight, ln_bias


def leaves(tensors, dtype):
    return [t.detach().to(dtype).requires_grad_() for t in tensors]


# ---- CPU: Philox, mask layout, reference formulas, op registration -------------------------
def test_philox_known_answers():
    # Random123's known-answer vectors for Philox4x32-10.
    cases = [
        ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        (
            [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
            [0xA4093822, 0x299F31D0],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ),
    ]
    for counter, key, expected in cases:
        out = ref.philox4x32_10(np.array(counter, np.uint32), np.array(key, np.uint32))
        assert out.tolist() == expected


def test_mask_pack_round_trip():
    keep = torch.rand(9, H, generator=torch.Generator().manual_seed(1)) > 0.3
    words = ref.pack_dropout_mask(keep)
    assert words.shape == (9, ref.MASK_WORDS) and words.dtype == torch.int32
    assert torch.equal(ref.unpack_dropout_mask(words), keep)
    # Word l holds columns (c * 32 + l) * 8 + j at bit c * 8 + j.
    one = torch.zeros(1, H, dtype=torch.bool)
    one[0, (2 * 32 + 5) * 8 + 3] = True
    assert ref.pack_dropout_mask(one)[0, 5].item() == 1 << (2 * 8 + 3)


def test_mask_packing_stays_on_the_masks_device():
    # The 2026-11-26 window: the reference built its bit shifts on the CPU, so packing a CUDA
    # mask failed. The meta device stands in for CUDA here.
    keep = torch.ones(3, H, dtype=torch.bool, device="meta")
    assert ref.pack_dropout_mask(keep).device.type == "meta"
    assert ref.unpack_dropout_mask(ref.pack_dropout_mask(keep)).device.type == "meta"


def test_keep_mask_statistics_and_reproducibility():
    keep = ref.dropout_keep_mask(256, 0.1, seed=1234, offset=8)
    frac = keep.float().mean().item()
    assert abs(frac - 0.9) < 4 * (0.09 / keep.numel()) ** 0.5
    assert torch.equal(keep, ref.dropout_keep_mask(256, 0.1, seed=1234, offset=8))
    assert not torch.equal(keep, ref.dropout_keep_mask(256, 0.1, seed=1234, offset=16))
    assert not torch.equal(keep, ref.dropout_keep_mask(256, 0.1, seed=1235, offset=8))
    assert ref.dropout_keep_mask(3, 0.0, seed=1, offset=0).all()


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_kernel_mask_function_matches_reference(tmp_path):
    """The kernel's own mask code (dropout_mask.h), built for the host, equals the numpy twin."""
    exe = tmp_path / "mask"
    subprocess.run(
        [
            "c++",
            "-std=c++17",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{ROOT / 'kernels' / 'csrc'}",
            str(Path(__file__).with_name("bdrln_mask_host.cpp")),
            "-o",
            str(exe),
        ],
        check=True,
    )
    for seed, offset, rows, p in [(0, 0, 3, 0.1), (2**40 + 17, 2**33 + 4, 5, 0.5)]:
        out = subprocess.run(
            [str(exe), str(seed), str(offset), str(rows), str(ref.drop_threshold(p))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        words = torch.tensor([int(w) for w in out], dtype=torch.int64).reshape(rows, 32)
        expected = ref.pack_dropout_mask(ref.dropout_keep_mask(rows, p, seed, offset))
        assert torch.equal(words, expected.to(torch.int64) & 0xFFFFFFFF)


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_forward_reference_matches_composition(p):
    x, bias, residual, weight, ln_bias = make_inputs(13, torch.float32, torch.float32)
    y, z, mean, rstd, mask = ref.bdrln_forward_ref(
        x, bias, residual, weight, ln_bias, p, EPS, seed=5, offset=0
    )
    keep = ref.unpack_dropout_mask(mask)
    expected = ref.bias_dropout_residual_layernorm_ref(
        x, bias, residual, weight, ln_bias, p, EPS, keep
    )
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, residual + (x + bias) * keep / (1 - p), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(mean, z.mean(-1))
    torch.testing.assert_close(rstd, torch.rsqrt(z.var(-1, unbiased=False) + EPS))


@pytest.mark.parametrize("p", [0.0, 0.25])
def test_backward_formula_matches_autograd(p):
    inputs = leaves(make_inputs(11, torch.float64, torch.float64), torch.float64)
    x, bias, residual, weight, ln_bias = inputs
    keep = ref.dropout_keep_mask(11, p, seed=9, offset=4)
    y = ref.bias_dropout_residual_layernorm_ref(x, bias, residual, weight, ln_bias, p, EPS, keep)
    dy = torch.randn_like(y)
    expected = torch.autograd.grad(y, inputs, dy)
    z = residual + (x + bias) * keep / (1 - p)
    mean, rstd = z.mean(-1), torch.rsqrt(z.var(-1, unbiased=False) + EPS)
    dx, dres, dweight, dln_bias, dbias = ref.bdrln_backward_ref(
        dy,
        z.detach(),
        mean.detach().float(),
        rstd.detach().float(),
        ref.pack_dropout_mask(keep),
        weight.detach(),
        p,
    )
    for name, got, want in [
        ("x", dx, expected[0]),
        ("bias", dbias, expected[1]),
        ("residual", dres, expected[2]),
        ("weight", dweight, expected[3]),
        ("ln_bias", dln_bias, expected[4]),
    ]:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_custom_op_registration_on_cpu():
    args = make_inputs(6, torch.float32, torch.float32)
    torch.library.opcheck(torch.ops.bert_kernels.bdrln_forward.default, (*args, 0.1, EPS, 7, 0))
    y, z, mean, rstd, mask = torch.ops.bert_kernels.bdrln_forward(*args, 0.1, EPS, 7, 0)
    saved = [t.detach() for t in (torch.randn_like(y), z, mean, rstd, mask, args[3])]
    torch.library.opcheck(torch.ops.bert_kernels.bdrln_backward.default, (*saved, 0.1))


def test_functional_autograd_on_cpu_matches_composition():
    inputs = make_inputs(7, torch.float32, torch.float32)
    y = bias_dropout_residual_layernorm(*inputs, p=0.2, eps=EPS, seed=3, offset=0)
    keep = ref.dropout_keep_mask(7, 0.2, seed=3, offset=0)
    twins = leaves(inputs, torch.float32)
    y_ref = ref.bias_dropout_residual_layernorm_ref(*twins, 0.2, EPS, keep)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    dy = torch.randn_like(y)
    got_all, want_all = torch.autograd.grad(y, inputs, dy), torch.autograd.grad(y_ref, twins, dy)
    for got, want in zip(got_all, want_all, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # Evaluation mode: no dropout.
    y_eval = bias_dropout_residual_layernorm(*inputs, p=0.2, eps=EPS, training=False)
    torch.testing.assert_close(
        y_eval, ref.bias_dropout_residual_layernorm_ref(*twins, 0.0, EPS), rtol=1e-5, atol=1e-5
    )


def test_traces_under_torch_compile_on_cpu():
    inputs = make_inputs(5, torch.float32, torch.float32)

    def f(*a):
        return bias_dropout_residual_layernorm(*a, p=0.1, eps=EPS, seed=11, offset=0).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(*inputs), f(*inputs))


def test_rejects_other_hidden_sizes():
    x = torch.randn(4, 768)
    p = torch.randn(768)
    with pytest.raises(ValueError, match="hidden size 1024"):
        bias_dropout_residual_layernorm(x, p, x, p, p)


# ---- GPU: the fused kernel ------------------------------------------------------------------
def run_all(tokens, dtype, param_dtype, p, seed=1234):
    """Kernel, low-precision PyTorch and fp32 reference on the same inputs and mask."""
    inputs = make_inputs(tokens, dtype, param_dtype, device="cuda")
    y, z, mean, rstd, mask = torch.ops.bert_kernels.bdrln_forward(*inputs, p, EPS, seed, 0)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, inputs, dy)
    keep = ref.unpack_dropout_mask(mask)

    low = leaves(inputs, dtype)  # what the unfused model computes in fp16/bf16
    y_low = ref.bias_dropout_residual_layernorm_ref(*low, p, EPS, keep)
    grads_low = torch.autograd.grad(y_low, low, dy)
    full = leaves(inputs, torch.float32)
    y_ref = ref.bias_dropout_residual_layernorm_ref(*full, p, EPS, keep)
    grads_ref = torch.autograd.grad(y_ref, full, dy.float())
    return (y, grads, (z, mean, rstd, mask)), (y_low, grads_low), (y_ref, grads_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("p", [0.0, 0.1])
@pytest.mark.parametrize("param_dtype", ["act", torch.float32])
@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("tokens", TOKEN_COUNTS)
def test_kernel_matches_reference(cuda_kernels, tokens, dtype, param_dtype, p):
    pdt = dtype if param_dtype == "act" else param_dtype
    (y, grads, saved), (y_low, grads_low), (y_ref, grads_ref) = run_all(tokens, dtype, pdt, p)
    assert y.dtype == dtype and [g.dtype for g in grads] == [dtype, pdt, dtype, pdt, pdt]
    assert_within_torch_error("y", y, y_low, y_ref)
    for name, g, g_low, g_ref in zip(
        ("dx", "dbias", "dresidual", "dweight", "dln_bias"),
        grads,
        grads_low,
        grads_ref,
        strict=True,
    ):
        assert_within_torch_error(name, g, g_low, g_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_kernel_saved_tensors_and_mask_match_reference(cuda_kernels, dtype):
    inputs = make_inputs(509, dtype, torch.float32, device="cuda")
    seed, offset = 2**40 + 3, 2**33 + 8
    out = torch.ops.bert_kernels.bdrln_forward(*inputs, 0.1, EPS, seed, offset)
    expected = ref.bdrln_forward_ref(*[t.detach() for t in inputs], 0.1, EPS, seed, offset)
    assert torch.equal(out[4], expected[4])  # the mask, bit for bit
    torch.testing.assert_close(out[2], expected[2], rtol=0, atol=1e-5)  # mean
    torch.testing.assert_close(out[3], expected[3], rtol=1e-4, atol=0)  # rstd
    # z: the same fp32 value up to FMA contraction, then one rounding to the activation dtype.
    torch.testing.assert_close(out[1], expected[1], rtol=2 * torch.finfo(dtype).eps, atol=1e-4)


@pytest.mark.gpu
def test_kernel_dropout_uses_torch_generator(cuda_kernels):
    inputs = [t.detach() for t in make_inputs(2053, torch.float16, torch.float32, device="cuda")]
    torch.manual_seed(7)
    first = bias_dropout_residual_layernorm(*inputs, p=0.1, eps=EPS)
    second = bias_dropout_residual_layernorm(*inputs, p=0.1, eps=EPS)
    torch.manual_seed(7)
    again = bias_dropout_residual_layernorm(*inputs, p=0.1, eps=EPS)
    assert torch.equal(first, again) and not torch.equal(first, second)
    mask = torch.ops.bert_kernels.bdrln_forward(*inputs, 0.1, EPS, -1, 0)[4]
    frac = ref.unpack_dropout_mask(mask).float().mean().item()
    assert abs(frac - 0.9) < 0.005


@pytest.mark.gpu
def test_kernel_under_cuda_graph_draws_fresh_masks(cuda_kernels):
    inputs = [t.detach() for t in make_inputs(512, torch.bfloat16, torch.float32, device="cuda")]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the graph
        torch.ops.bert_kernels.bdrln_forward(*inputs, 0.1, EPS, -1, 0)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.bert_kernels.bdrln_forward(*inputs, 0.1, EPS, -1, 0)
    graph.replay()
    y1, mask1 = out[0].clone(), out[4].clone()
    graph.replay()
    assert not torch.equal(mask1, out[4])
    keep = ref.unpack_dropout_mask(mask1)
    y_ref = ref.bias_dropout_residual_layernorm_ref(*[t.float() for t in inputs], 0.1, EPS, keep)
    assert max_error(y1, y_ref) < 0.05


@pytest.mark.gpu
def test_kernel_under_torch_compile(cuda_kernels):
    inputs = make_inputs(509, torch.float16, torch.float32, device="cuda")

    def f(*a):
        return bias_dropout_residual_layernorm(*a, p=0.1, eps=EPS, seed=5, offset=0)

    y_eager = f(*inputs)
    y_compiled = torch.compile(f, fullgraph=True)(*inputs)
    assert torch.equal(y_eager, y_compiled)


@pytest.mark.gpu
def test_kernel_binding_rejects_bad_tensors(cuda_kernels):
    x, bias, residual, weight, ln_bias = [
        t.detach() for t in make_inputs(8, torch.float16, torch.float32, device="cuda")
    ]
    raw = torch.ops.bert_kernels_cuda.bdrln_forward
    with pytest.raises(RuntimeError, match="contiguous"):
        raw(x, bias, residual.t().contiguous().t(), weight, ln_bias, 0.1, EPS, 1, 0)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        raw(x.float(), bias, residual.float(), weight, ln_bias, 0.1, EPS, 1, 0)
    with pytest.raises(RuntimeError, match="must be float32 or"):
        raw(x, bias.double(), residual, weight.double(), ln_bias.double(), 0.1, EPS, 1, 0)
    with pytest.raises(RuntimeError, match="CUDA tensor"):
        raw(x, bias.cpu(), residual, weight, ln_bias, 0.1, EPS, 1, 0)
    with pytest.raises(RuntimeError, match="aligned"):
        raw(
            x.view(-1)[4 : 4 + 7 * H].view(7, H),
            bias,
            residual[:7],
            weight,
            ln_bias,
            0.1,
            EPS,
            1,
            0,
        )
    with pytest.raises(RuntimeError, match="hidden size 1024"):
        raw(
            x[:, :512].contiguous(),
            bias,
            residual[:, :512].contiguous(),
            weight,
            ln_bias,
            0.1,
            EPS,
            1,
            0,
        )
