"""LAMB with the MLPerf BERT reference semantics (REFERENCE.md section 1).

This is the single-process, torch.optim-style optimizer. It matches apex `FusedLAMB` with
`bias_correction=True, adam_w_mode=True, use_nvlamb=False`:

    g      <- g * max_grad_norm / max(|G|, max_grad_norm)   (|G|: global norm over all groups)
    m      <- b1 * m + (1 - b1) * g
    v      <- b2 * v + (1 - b2) * g^2
    u      <- (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w
    ratio  <- |w| / |u|   (1 where either norm is 0; only in groups with wd != 0)
    w      <- w - lr * ratio * u

All math runs through `torch._foreach_*` ops and stays on the device: the clip coefficient and the
trust ratios are tensors, so `step()` never reads a value back to the host. The step count `t`
is a host-side Python int per parameter (it never depends on device values).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

import torch
from torch import Tensor

LR = Union[float, Tensor]

_MOMENT_KEYS = ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class LambHparams:
    """LAMB's hyperparameters, defaulted and checked once for `LAMB` and `ShardedOptimizer`.

    lr: a float, or a 0-dim tensor the caller may update in place each step (no host sync).
    betas: (beta1, beta2) for the first and second moments.
    eps: added to sqrt(v_hat) (outside the square root, as in the reference).
    weight_decay: decoupled decay added to the update; 0 also turns off the trust ratio.
    max_grad_norm: clip gradients to this global L2 norm; <= 0 disables clipping.
    """

    lr: LR = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.lr, Tensor) and self.lr < 0.0:
            raise ValueError(f"invalid learning rate: {self.lr}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"invalid betas: {self.betas}")
        if self.eps < 0.0:
            raise ValueError(f"invalid eps: {self.eps}")
        if self.weight_decay < 0.0:
            raise ValueError(f"invalid weight_decay: {self.weight_decay}")

    def group_defaults(self) -> dict[str, Any]:
        """torch.optim's per-group defaults (a group may override lr and weight_decay)."""
        return dict(lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)


class LAMB(torch.optim.Optimizer):
    """Layer-wise adaptive moments (LAMB), MLPerf BERT flavour.

    Args:
        params: parameters or parameter groups; a group may override `lr` and `weight_decay`.
        hparams: `LambHparams`' fields by name (lr, betas, eps, weight_decay, max_grad_norm).

    After each `step()`, `last_grad_norm` holds the global gradient norm before clipping
    (0-dim fp32 tensor on the gradients' device), for logging.
    State per parameter: `step` (int), `exp_avg`, `exp_avg_sq` (fp32, shaped like the param).
    """

    def __init__(self, params: Iterable, **hparams: Any):
        hp = LambHparams(**hparams)
        super().__init__(params, hp.group_defaults())
        self.max_grad_norm = float(hp.max_grad_norm)
        self.last_grad_norm: Tensor = torch.zeros(())

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Tensor]] = None) -> Optional[Tensor]:
        loss = closure_loss(closure)
        groups = [self._gather(group) for group in self.param_groups]
        all_grads = [g for gathered in groups for g in gathered["grads"]]
        if not all_grads:
            return loss
        self.last_grad_norm = _global_norm(all_grads)
        coef = _clip_coef(self.last_grad_norm, self.max_grad_norm)
        for group, gathered in zip(self.param_groups, groups):
            if gathered["params"]:
                _lamb_group(group, gathered, coef)
        return loss

    def _gather(self, group: dict) -> dict[str, list]:
        """Lists of the group's params that have a gradient, with their (new) state.

        Increments each such parameter's step count; parameters without a gradient keep theirs.
        """
        out: dict[str, list] = {
            "params": [],
            "grads": [],
            "exp_avg": [],
            "exp_avg_sq": [],
            "steps": [],
        }
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("LAMB does not support sparse gradients")
            state = self.state[p]
            if not state:
                state["step"] = 0
                for key in _MOMENT_KEYS:
                    state[key] = torch.zeros_like(
                        p, dtype=torch.float32, memory_format=torch.preserve_format
                    )
            state["step"] += 1
            out["params"].append(p)
            out["grads"].append(p.grad)
            out["exp_avg"].append(state["exp_avg"])
            out["exp_avg_sq"].append(state["exp_avg_sq"])
            out["steps"].append(state["step"])
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads like torch.optim, but keeps moments in fp32 and tensor lrs in place.

        torch.optim casts saved state to each param's dtype (which would round fp32 moments of an
        fp16/bf16 param), and replaces a group's tensor `lr` with the saved copy (which would
        detach it from the schedule that writes into it); both are undone here.
        """
        saved = copy.deepcopy(state_dict)
        lr_tensors = [g["lr"] if isinstance(g["lr"], Tensor) else None for g in self.param_groups]
        super().load_state_dict(state_dict)
        for group, saved_group, lr_tensor in zip(
            self.param_groups, saved["param_groups"], lr_tensors
        ):
            if lr_tensor is not None:
                lr_tensor.copy_(torch.as_tensor(group["lr"]))
                group["lr"] = lr_tensor
            for p, index in zip(group["params"], saved_group["params"]):
                for key in _MOMENT_KEYS:
                    if index in saved["state"] and key in saved["state"][index]:
                        self.state[p][key] = saved["state"][index][key].to(
                            device=p.device, dtype=torch.float32
                        )


def closure_loss(closure: Optional[Callable[[], Tensor]]) -> Optional[Tensor]:
    """torch.optim's closure protocol for `step(closure)`: the loss it returns, computed with
    gradients enabled (the step itself runs under no_grad); None without one."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _global_norm(tensors: list[Tensor]) -> Tensor:
    """L2 norm over all elements of all tensors, as a 0-dim fp32 tensor (no host sync).

    Per-tensor norms are taken in fp32 so fp16 gradients cannot overflow in the sum of squares.
    """
    device = tensors[0].device
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
    return torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]))


def _clip_coef(norm: Tensor, max_norm: float) -> Tensor:
    """max_norm / max(norm, max_norm): 1 when within the limit (0-dim tensor).

    A non-finite norm gives 0 or NaN; the loss scaler is expected to skip such steps.
    """
    if max_norm <= 0.0:
        return torch.ones_like(norm)
    return max_norm / norm.clamp_min(max_norm)


def _lamb_group(group: dict, gathered: dict[str, list], coef: Tensor) -> None:
    """One LAMB update of the params in `gathered` (all of one param group)."""
    beta1, beta2 = group["betas"]
    params, exp_avgs, exp_avg_sqs = gathered["params"], gathered["exp_avg"], gathered["exp_avg_sq"]
    grads = torch._foreach_mul([g.float() for g in gathered["grads"]], coef)
    _update_moments(exp_avgs, exp_avg_sqs, grads, beta1, beta2)
    del grads
    weights = [p if p.dtype == torch.float32 else p.float() for p in params]
    updates = _adam_direction(exp_avgs, exp_avg_sqs, gathered["steps"], beta1, beta2, group["eps"])
    lr = group["lr"]
    if group["weight_decay"] != 0.0:
        torch._foreach_add_(updates, weights, alpha=group["weight_decay"])
        scale = _trust_ratios(weights, updates) * lr
        torch._foreach_mul_(updates, list(scale.unbind()))
    else:
        torch._foreach_mul_(updates, lr)  # float or 0-dim tensor lr alike
    torch._foreach_sub_(params, updates)


def _update_moments(
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    grads: list[Tensor],
    beta1: float,
    beta2: float,
) -> None:
    """m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2, in place (all fp32)."""
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)


def _adam_direction(
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    steps: list[int],
    beta1: float,
    beta2: float,
    eps: float,
) -> list[Tensor]:
    """New list of m_hat / (sqrt(v_hat) + eps) with per-param bias correction for step t."""
    # Steps are host ints, so the corrections are plain floats: no device work, no sync.
    bc1 = [1.0 - beta1**t for t in steps]
    bc2 = [1.0 - beta2**t for t in steps]
    denom = torch._foreach_div(exp_avg_sqs, bc2)
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, eps)
    updates = torch._foreach_div(exp_avgs, bc1)
    torch._foreach_div_(updates, denom)
    return updates


def _trust_ratios(weights: list[Tensor], updates: list[Tensor]) -> Tensor:
    """|w| / |u| per tensor, 1 where either norm is 0. Returns (n_params,) fp32."""
    device = weights[0].device
    w_norm = torch.stack([n.to(device) for n in torch._foreach_norm(weights)])
    u_norm = torch.stack([n.to(device) for n in torch._foreach_norm(updates)])
    usable = (w_norm > 0) & (u_norm > 0)
    # where() evaluates both branches; the 0/0 NaNs it discards are harmless.
    return torch.where(usable, w_norm / u_norm, torch.ones_like(w_norm))
