"""The reference convergence points (RCPs) of MLPerf BERT, read from the installed mlperf-logging.

mlperf-logging's `rcp_checker/training_5.0.0/rcps_bert.json` holds 13 RCPs (global batch 256 to
16,384), each with the hyperparameters its reference runs used and the samples each run took to
reach 0.720 (REFERENCE 8). The table is read through the checker's own `RCP_Checker`, so the
statistics are the checker's: an RCP's mean is the olympic mean of its runs (fastest and slowest
dropped), and its "min acceptable mean" is the fastest submission mean the checker's one-sided
t-test still accepts.

How the checker picks the reference for a global batch (read from its `check_directory`; the
package checker runs it with the pruned set):
- it first prunes the table: RCPs with a smaller batch than the fastest-converging one go, and so
  does every RCP that converges slower than the straight line between its two neighbours;
- a batch with a pruned RCP of its own is checked against that RCP;
- a batch between two pruned RCPs is checked against a line between the nearest one below and
  the nearest one above: mean and standard deviation interpolated linearly in the batch size;
- a batch below the smallest pruned RCP is checked against that smallest one (it passes when it
  converges no faster); a batch above the largest has no reference and fails.
The checker interpolates only the convergence point, never hyperparameters. For a batch without
an RCP of its own the planner therefore proposes hyperparameters itself (`hyperparameters_for`)
and flags them as interpolated.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from bert.mlperf import constants as C
from bert.mlperf.constants import BENCHMARK, RULESET, USAGE


class RCPError(ValueError):
    """A global batch the RCP table cannot serve; the message says why."""


@dataclass(frozen=True)
class RCP:
    """One reference convergence point (or the checker's interpolation between two)."""

    name: str  # bert_ref_<bs>, or bert_interp_<bs>
    global_batch_size: int
    mean_samples: float  # olympic mean of the reference runs' samples to 0.720
    min_acceptable_mean: float  # the fastest submission mean the checker accepts
    samples: tuple[int, ...] = ()  # every reference run (empty for an interpolation)
    hyperparameters: dict = field(default_factory=dict)  # empty for an interpolation

    @property
    def interpolated(self) -> bool:
        return not self.samples


@functools.lru_cache(maxsize=1)
def _checker():
    """mlperf-logging's RCP checker for BERT, training 5.0.0 (imported lazily: the GPU machine
    and the model code do not need it)."""
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    return RCP_Checker(USAGE, RULESET, BENCHMARK, False)


def _record(record: dict, name: str) -> RCP:
    return RCP(
        name=name,
        global_batch_size=int(record["BS"]),
        mean_samples=float(record["RCP Mean"]),
        min_acceptable_mean=float(record["Min Epochs"]),
        samples=tuple(int(s) for s in record["Epochs to converge"]),
        hyperparameters=dict(record["Hyperparams"]),
    )


def table(pruned: bool = False) -> list[RCP]:
    """Every RCP of the installed table (or only those the pruning keeps), by batch size."""
    checker = _checker()
    records = checker.pruned_rcp_data if pruned else checker.rcp_data
    return sorted(
        (_record(r, name) for name, r in records.items()), key=lambda rcp: rcp.global_batch_size
    )


def own_rcp(global_batch_size: int) -> RCP | None:
    """The RCP measured at exactly this batch, if the table has one (pruned or not)."""
    return next((r for r in table() if r.global_batch_size == global_batch_size), None)


def checked_against(global_batch_size: int) -> tuple[RCP, str]:
    """(the reference the RCP checker compares runs at this batch with, how it found it).

    Raises RCPError above the largest RCP, where the checker has nothing to compare with."""
    checker = _checker()
    found = checker._find_rcp(global_batch_size, "pruned_rcps")
    if found is not None:
        return _record(found, _name_of(found)), "its own RCP"
    low = checker._find_top_min_rcp(global_batch_size, "pruned_rcps")
    high = checker._find_bottom_max_rcp(global_batch_size, "pruned_rcps")
    if low is not None and high is not None:
        name, record = checker._create_interp_rcp(global_batch_size, low, high)
        rcp = RCP(name, global_batch_size, float(record["RCP Mean"]), float(record["Min Epochs"]))
        return rcp, (
            f"interpolated between {_name_of(low)} and {_name_of(high)} (the checker's pruned set)"
        )
    if low is None and high is not None:
        smallest = checker._find_min_rcp("pruned_rcps")
        return (
            _record(smallest, _name_of(smallest)),
            "the smallest pruned RCP: runs must converge no faster than it",
        )
    largest = table(pruned=True)[-1].global_batch_size
    raise RCPError(
        f"global batch {global_batch_size} lies above the largest reference "
        f"convergence point ({largest}): the RCP checker has nothing to compare it "
        f"with, so the closed division cannot accept it"
    )


def _name_of(record: dict) -> str:
    return next(name for name, r in _checker().rcp_data.items() if r is record)


# ---------------------------------------------------------------------------------------------
# Hyperparameters for a global batch

# RCP hyperparameter name (the log's key; the RCP table's own name for the epsilon) -> this
# program's config key
CONFIG_KEYS = {
    C.OPT_BASE_LR: "optim.lr",
    C.OPT_LAMB_BETA_1: "optim.beta1",
    C.OPT_LAMB_BETA_2: "optim.beta2",
    "opt_epsilon": "optim.eps",
    C.OPT_LAMB_WEIGHT_DECAY: "optim.weight_decay",
    C.OPT_LR_TRAINING_STEPS: "schedule.total_steps",
    C.NUM_WARMUP_STEPS: "schedule.warmup_steps",
    C.START_WARMUP_STEP: "schedule.start_warmup_step",
}
INTEGER_KEYS = ("schedule.total_steps", "schedule.warmup_steps", "schedule.start_warmup_step")


@dataclass(frozen=True)
class Plan:
    """Hyperparameters and expected samples to converge for one global batch."""

    global_batch_size: int
    settings: dict  # config key -> value (CONFIG_KEYS' values)
    source: str  # where the settings come from, in words
    interpolated: bool
    samples_mean: float  # expected samples to 0.720 with these settings
    samples_low: float  # fastest and slowest reference run (interpolated likewise)
    samples_high: float
    reference: RCP  # what the RCP checker compares a submission at this batch with
    reference_rule: str
    basis: str = "reference point"  # or "published submissions" or "interpolated"


def _settings(rcp: RCP) -> dict:
    values = {CONFIG_KEYS[k]: v for k, v in rcp.hyperparameters.items() if k in CONFIG_KEYS}
    return {k: int(v) if k in INTEGER_KEYS else float(v) for k, v in values.items()}


def _neighbours(global_batch_size: int) -> tuple[RCP, RCP]:
    full = table()
    below = [r for r in full if r.global_batch_size < global_batch_size]
    above = [r for r in full if r.global_batch_size > global_batch_size]
    if not below or not above:
        raise RCPError(
            f"global batch {global_batch_size} lies outside the reference "
            f"convergence points ({full[0].global_batch_size} to "
            f"{full[-1].global_batch_size}): no RCP hyperparameters to start from"
        )
    return below[-1], above[0]


def plan_for(global_batch_size: int, published: dict | None = None) -> Plan:
    """The RCP's own hyperparameters where the table has this batch; else, where `published`
    has the batch (batch -> (config settings, expected samples or None for the RCP line,
    source); the planner passes what published submissions converged with,
    bert/plan/published_hyper.py), those; else the planner's interpolation between two RCPs
    (`_interpolate`). Raises RCPError outside the table or above what the checker accepts."""
    reference, rule = checked_against(global_batch_size)
    own = own_rcp(global_batch_size)
    if own is not None:
        return Plan(
            global_batch_size,
            _settings(own),
            f"{own.name} (its own RCP)",
            False,
            own.mean_samples,
            min(own.samples),
            max(own.samples),
            reference,
            rule,
        )
    low, high = _neighbours(global_batch_size)
    t = (global_batch_size - low.global_batch_size) / (
        high.global_batch_size - low.global_batch_size
    )
    found = (published or {}).get(global_batch_size)
    if found is not None:
        settings, samples, source = found
        line_mean = _lerp(low.mean_samples, high.mean_samples, t)
        mean = samples or line_mean
        return Plan(
            global_batch_size,
            dict(settings),
            source,
            False,
            mean,
            mean * _lerp(min(low.samples), min(high.samples), t) / line_mean,
            mean * _lerp(max(low.samples), max(high.samples), t) / line_mean,
            reference,
            rule,
            "published submissions",
        )
    return Plan(
        global_batch_size,
        _interpolate(low, high, t, global_batch_size),
        f"interpolated between {low.name} and {high.name}",
        True,
        _lerp(low.mean_samples, high.mean_samples, t),
        _lerp(min(low.samples), min(high.samples), t),
        _lerp(max(low.samples), max(high.samples), t),
        reference,
        rule,
        "interpolated",
    )


def _lerp(a: float, b: float, t: float) -> float:
    return a + (b - a) * t


def _interpolate(low: RCP, high: RCP, t: float, global_batch_size: int) -> dict:
    """The planner's rule between two RCPs (the checker has none for hyperparameters): the base
    learning rate linearly in the batch size; the schedule's length and warmup linearly in
    training samples (steps x batch), converted back to steps at this batch; betas, epsilon,
    weight decay and start_warmup_step from the neighbour nearer in batch size."""
    lo, hi = _settings(low), _settings(high)
    near = lo if t <= 0.5 else hi
    settings = dict(near)
    settings["optim.lr"] = _lerp(lo["optim.lr"], hi["optim.lr"], t)
    for key in ("schedule.total_steps", "schedule.warmup_steps"):
        samples = _lerp(lo[key] * low.global_batch_size, hi[key] * high.global_batch_size, t)
        settings[key] = max(int(round(samples / global_batch_size)), 0)
    settings["schedule.total_steps"] = max(settings["schedule.total_steps"], 1)
    return settings


def mismatch(global_batch_size: int, settings: dict) -> str | None:
    """Why a closed-division run's settings match no RCP (None when they match its batch's
    RCP exactly). settings: config key -> value for CONFIG_KEYS' values."""
    own = own_rcp(global_batch_size)
    if own is None:
        try:
            reference, rule = checked_against(global_batch_size)
        except RCPError as err:
            return str(err)
        return (
            f"global batch {global_batch_size} has no RCP of its own; the RCP convergence "
            f"check compares its samples to converge with {reference.name} ({rule})"
        )
    expected = _settings(own)
    differ = [
        f"{key}={settings.get(key)!r} (RCP: {value!r})"
        for key, value in expected.items()
        if not _same(settings.get(key), value)
    ]
    if not differ:
        return None
    return (
        f"hyperparameters differ from {own.name}, the RCP of global batch "
        f"{global_batch_size}: {', '.join(differ)} (allowed: the rules leave the optimizer "
        f"hyperparameters free, but the RCP convergence check compares the runs' samples to "
        f"0.720 with that RCP's)"
    )


def _same(a, b) -> bool:
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    except (TypeError, ValueError):
        return False
