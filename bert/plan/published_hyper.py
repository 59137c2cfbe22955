"""The planner's second source of hyperparameters: what published closed-division submissions
converged with, at every global batch that has no RCP of its own.

Read from bert/plan/published_results.json (every row is a result whose runs reached 0.720, its
hyperparameters as its first log prints them). A key a log does not print takes the value every
RCP and the reference code use (epsilon 1e-6, no warmup, start_warmup_step 0). Where results at
one batch differ, the set most of them used wins; a tie goes to the newest round, then to the
source path, so the choice is deterministic. The expected samples to converge stay the RCP
line's (the planner never predicts with a submission's own samples), except at 768, where
shared/REFERENCE.md 3 states them for the H100/H200 reference (about 2.5M).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from bert.mlperf import rcp
from bert.plan import scale

DEFAULTS = {"optim.eps": 1e-6, "schedule.warmup_steps": 0, "schedule.start_warmup_step": 0}
# batch -> (expected samples to 0.720, its source) where a stated figure exists
STATED_SAMPLES = {768: (2.5e6, "REFERENCE.md 3 (H100/H200 reference, about 2.5M samples)")}


def _config_settings(hyperparameters: dict) -> dict:
    """A log's hyperparameters as config settings (rcp.CONFIG_KEYS), defaults filled in."""
    out = dict(DEFAULTS)
    for key, value in hyperparameters.items():
        if key in rcp.CONFIG_KEYS:
            name = rcp.CONFIG_KEYS[key]
            out[name] = int(value) if name in rcp.INTEGER_KEYS else float(value)
    return out


def _chosen(rows: list[dict]) -> tuple[dict, list[dict]]:
    """(settings, the rows that used them): the most used set, ties by newest round, then
    source path."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        settings = _config_settings(row["hyperparameters"])
        groups[tuple(sorted(settings.items()))].append(row)

    def rank(item):
        _, users = item
        newest = max(users, key=lambda r: (r["round"], scale.row_id(r)))
        return (len(users), newest["round"], scale.row_id(newest))

    key, users = max(groups.items(), key=rank)
    return dict(key), users


def settings_by_batch(rows: list[dict] | None = None) -> dict[int, tuple[dict, float | None, str]]:
    """batch -> (config settings, expected samples or None for the RCP line, source in words),
    for every published batch without an RCP of its own (rcp.plan_for's `published`)."""
    rows = scale.published_results() if rows is None else rows
    by_batch: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        by_batch[row["global_batch_size"]].append(row)
    out = {}
    for batch, at_batch in sorted(by_batch.items()):
        if rcp.own_rcp(batch) is not None:
            continue
        settings, users = _chosen(at_batch)
        first = min(users, key=lambda r: (r["round"], scale.row_id(r)))
        source = (
            f"published submissions at {batch}: {len(users)} of {len(at_batch)} converged "
            f"results used these (first {first['submitter']} {first['round']} "
            f"{first['system']}; bert/plan/published_results.json)"
        )
        samples, said = STATED_SAMPLES.get(batch, (None, None))
        out[batch] = (
            settings,
            samples,
            f"{source}; samples to converge: {said}" if said else source,
        )
    return out


@lru_cache(maxsize=1)
def published() -> dict[int, tuple[dict, float | None, str]]:
    """settings_by_batch() of the shipped results, read once."""
    return settings_by_batch()
