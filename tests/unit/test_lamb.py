"""bert.optim.LAMB against a plain float64 reference LAMB, plus state, lr and group checks.

The reference below is written straight from the LAMB description in REFERENCE.md section 1
(MLPerf BERT reference LAMB = apex FusedLAMB with bias_correction, adam_w_mode, no nvlamb):
global-norm clipping at max_grad_norm, bias-corrected Adam direction with eps outside the sqrt,
decoupled weight decay added to the update, trust ratio |w|/|u| (1 where a norm is 0), and
neither decay nor trust ratio for the no-decay (bias / LayerNorm) group.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from bert.optim import LAMB, param_groups

BETAS = (0.9, 0.999)
EPS = 1e-6
WD = 0.01
MAX_NORM = 1.0


# ----------------------------------------------------------------------------- reference


class RefLAMB:
    """Per-tensor Python loop in float64; state keyed by parameter name."""

    def __init__(self, weights: dict[str, torch.Tensor], decay: dict[str, float]):
        self.w = {n: t.detach().double().clone() for n, t in weights.items()}
        self.decay = decay  # name -> weight decay of its group
        self.m = {n: torch.zeros_like(t) for n, t in self.w.items()}
        self.v = {n: torch.zeros_like(t) for n, t in self.w.items()}
        self.t = {n: 0 for n in self.w}
        self.last_norm = 0.0

    def step(self, grads: dict[str, torch.Tensor | None], lr: float) -> None:
        present = {n: g.double() for n, g in grads.items() if g is not None}
        norm = math.sqrt(sum(float((g * g).sum()) for g in present.values()))
        self.last_norm = norm
        coef = MAX_NORM / norm if (MAX_NORM > 0 and norm > MAX_NORM) else 1.0
        b1, b2 = BETAS
        for n, g in present.items():
            g = g * coef
            self.t[n] += 1
            t = self.t[n]
            self.m[n] = b1 * self.m[n] + (1 - b1) * g
            self.v[n] = b2 * self.v[n] + (1 - b2) * g * g
            m_hat = self.m[n] / (1 - b1**t)
            v_hat = self.v[n] / (1 - b2**t)
            wd = self.decay[n]
            update = m_hat / (v_hat.sqrt() + EPS) + wd * self.w[n]
            ratio = 1.0
            if wd != 0:
                w_norm, u_norm = float(self.w[n].norm()), float(update.norm())
                ratio = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else 1.0
            self.w[n] = self.w[n] - lr * ratio * update


# ----------------------------------------------------------------------------- fixtures


class Tiny(torch.nn.Module):
    """Mixed groups: decay weights, biases, a LayerNorm, an all-zero weight, an unused weight."""

    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(8, 6)
        self.LayerNorm = torch.nn.LayerNorm(6)
        self.out = torch.nn.Linear(6, 5)
        self.zero_w = torch.nn.Parameter(torch.zeros(3, 4))  # |w| = 0: trust ratio 1 on step 1
        self.unused = torch.nn.Parameter(torch.randn(4))  # never gets a gradient


def make_model(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    model = Tiny()
    with torch.no_grad():
        model.LayerNorm.weight.add_(0.1 * torch.randn(6))
        model.LayerNorm.bias.add_(0.1 * torch.randn(6))
    return model


def grad_plan(n_steps: int, seed: int = 1) -> list[dict[str, torch.Tensor | None]]:
    """Random grads per step; odd steps large (clipping triggers), even steps small (it does not).

    Step 3 leaves `out.bias` without a gradient, so its step count lags the others.
    """
    gen = torch.Generator().manual_seed(seed)
    model = make_model()
    plan = []
    for k in range(n_steps):
        scale = 2.0 if k % 2 else 0.02
        grads = {}
        for name, p in model.named_parameters():
            skip = name == "unused" or (k == 3 and name == "out.bias")
            grads[name] = None if skip else scale * torch.randn(p.shape, generator=gen)
        plan.append(grads)
    return plan


def set_grads(model: torch.nn.Module, grads: dict[str, torch.Tensor | None]) -> None:
    for name, p in model.named_parameters():
        g = grads[name]
        p.grad = None if g is None else g.clone()


def lr_for(k: int) -> float:
    return 0.05 * (1 - k / 20)


def decay_by_name(model: torch.nn.Module) -> dict[str, float]:
    out = {}
    for group in param_groups(model, WD):
        out.update({n: group["weight_decay"] for n in group["names"]})
    return out


def make_opt(model: torch.nn.Module, lr=0.05) -> LAMB:
    return LAMB(
        param_groups(model, WD),
        lr=lr,
        betas=BETAS,
        eps=EPS,
        weight_decay=WD,
        max_grad_norm=MAX_NORM,
    )


# ----------------------------------------------------------------------------- tests


def test_matches_float64_reference_over_12_steps():
    model = make_model()
    opt = make_opt(model)
    named = dict(model.named_parameters())
    ref = RefLAMB(named, decay_by_name(model))
    plan = grad_plan(12)
    norms = []
    for k, grads in enumerate(plan):
        set_grads(model, grads)
        for group in opt.param_groups:
            group["lr"] = lr_for(k)
        opt.step()
        ref.step(grads, lr_for(k))
        norms.append(ref.last_norm)
        assert float(opt.last_grad_norm) == pytest.approx(ref.last_norm, rel=1e-5)
        for name, p in named.items():
            torch.testing.assert_close(
                p.detach().double(),
                ref.w[name],
                rtol=2e-5,
                atol=2e-6,
                msg=f"{name} differs at step {k}",
            )
    assert max(norms) > MAX_NORM > min(norms), "plan must cover clipped and unclipped steps"
    assert opt.state[model.out.bias]["step"] == 11  # skipped once (grad None at step 3)
    assert opt.state[model.dense.weight]["step"] == 12


def test_groups_split_by_name():
    model = make_model()
    decay, no_decay = param_groups(model, WD)
    assert decay["weight_decay"] == WD and no_decay["weight_decay"] == 0.0
    assert set(decay["names"]) == {"dense.weight", "out.weight", "zero_w", "unused"}
    assert set(no_decay["names"]) == {
        "dense.bias",
        "LayerNorm.weight",
        "LayerNorm.bias",
        "out.bias",
    }


def test_tied_parameter_listed_once():
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(7, 4)
    model.decoder = torch.nn.Linear(4, 7)
    model.decoder.weight = model.embed.weight  # tied, as BERT's MLM decoder is
    groups = param_groups(model, WD)
    all_params = [p for g in groups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params}) == 2  # shared weight + bias


def test_zero_weight_uses_ratio_one():
    """|w| = 0 on the first step: the update is lr * (adam dir + 0), not scaled by 0/|u|."""
    model = make_model()
    opt = make_opt(model, lr=0.1)
    grads = grad_plan(1)[0]
    set_grads(model, grads)
    opt.step()
    assert model.zero_w.abs().min() > 0
    g = grads["zero_w"]
    # Step 1: m_hat = g', v_hat = g'^2 (g' = clipped g); direction = g' / (|g'| + eps).
    coef = min(1.0, MAX_NORM / float(opt.last_grad_norm))
    expected = -0.1 * (g * coef) / ((g * coef).abs() + EPS)
    torch.testing.assert_close(model.zero_w.detach(), expected)


def test_param_without_grad_is_untouched():
    model = make_model()
    before = model.unused.detach().clone()
    opt = make_opt(model)
    for grads in grad_plan(3):
        set_grads(model, grads)
        opt.step()
    assert torch.equal(model.unused, before)
    assert model.unused not in opt.state


def test_grad_norm_counts_only_present_grads():
    model = make_model()
    opt = make_opt(model)
    grads = grad_plan(1)[0]
    set_grads(model, grads)
    opt.step()
    expected = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values() if g is not None))
    assert float(opt.last_grad_norm) == pytest.approx(float(expected), rel=1e-6)
    assert opt.last_grad_norm.dim() == 0


def run(model: torch.nn.Module, opt: LAMB, plan, lr_of_step) -> None:
    for k, grads in enumerate(plan):
        set_grads(model, grads)
        lr_of_step(opt, k)
        opt.step()


def test_tensor_lr_matches_float_lr():
    plan = grad_plan(6)
    model_f, model_t = make_model(), make_model()
    opt_f = make_opt(model_f)
    lr = torch.tensor(0.05)
    opt_t = make_opt(model_t, lr=lr)
    for group in opt_t.param_groups:
        assert group["lr"] is lr

    def set_float(opt, k):
        for group in opt.param_groups:
            group["lr"] = lr_for(k)

    run(model_f, opt_f, plan, set_float)
    run(model_t, opt_t, plan, lambda opt, k: lr.fill_(lr_for(k)))  # in place, as on a device
    for a, b in zip(model_f.parameters(), model_t.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_state_dict_round_trip_resumes_identically():
    plan = grad_plan(10)
    model_a = make_model()
    lr_a = torch.tensor(0.05)
    opt_a = make_opt(model_a, lr=lr_a)
    set_lr = lambda opt, k: opt.param_groups[0]["lr"].fill_(lr_for(k))  # noqa: E731
    run(model_a, opt_a, plan[:5], set_lr)
    saved_model = copy.deepcopy(model_a.state_dict())
    saved_opt = copy.deepcopy(opt_a.state_dict())
    run(model_a, opt_a, plan[5:], lambda opt, k: set_lr(opt, k + 5))

    model_b = make_model(seed=123)  # different init: everything must come from the checkpoint
    model_b.load_state_dict(saved_model)
    lr_b = torch.tensor(0.0)
    opt_b = make_opt(model_b, lr=lr_b)
    opt_b.load_state_dict(saved_opt)
    assert opt_b.param_groups[0]["lr"] is lr_b  # the schedule's tensor is still the one used
    run(model_b, opt_b, plan[5:], lambda opt, k: set_lr(opt, k + 5))
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(a, b)


def test_load_keeps_fp32_moments_for_bf16_params():
    model = make_model().to(torch.bfloat16)
    opt = make_opt(model)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    opt2 = make_opt(model)
    opt2.load_state_dict(opt.state_dict())
    state = opt2.state[model.dense.weight]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    assert torch.equal(state["exp_avg"], opt.state[model.dense.weight]["exp_avg"])


def test_step_reads_nothing_back_from_tensors(monkeypatch):
    """No .item()/float()/bool() on tensors inside step(): those are host syncs on a GPU."""
    model = make_model()
    opt = make_opt(model, lr=torch.tensor(0.05))
    set_grads(model, grad_plan(1)[0])

    def forbidden(*_args, **_kwargs):
        raise AssertionError("host read of a tensor value inside LAMB.step()")

    for attr in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, attr, forbidden)
    opt.step()
    monkeypatch.undo()
    assert torch.isfinite(opt.last_grad_norm)


def test_no_clipping_when_disabled():
    model = make_model()
    opt = LAMB(param_groups(model, 0.0), lr=0.1, max_grad_norm=0.0)
    for p in model.parameters():
        p.grad = torch.full_like(p, 100.0)
    before = model.dense.weight.detach().clone()
    opt.step()
    # No decay anywhere, so no trust ratio: step 1 moves each weight by lr * g/(|g| + eps).
    torch.testing.assert_close(model.dense.weight, before - 0.1 * 100.0 / (100.0 + EPS))
