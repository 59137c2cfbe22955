"""Start-of-run and packaging checks against the RCP table."""

from __future__ import annotations

import os
import sys

from bert.mlperf import rcp

BERT_LARGE = (1024, 24, 16, 4096)  # hidden, layers, heads, FFN (REFERENCE 1)


def rcp_warning(cfg) -> str | None:
    """Why a closed-division BERT-Large run's hyperparameters match no RCP for its global batch
    (None when they match, or when the RCPs do not apply: open division, another model size,
    eval only)."""
    m = cfg.model
    if (
        cfg.submission.division != "closed"
        or cfg.run.eval_only
        or (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.intermediate_size)
        != BERT_LARGE
    ):
        return None
    settings = {key: _value(cfg, key) for key in rcp.CONFIG_KEYS.values()}
    try:
        return rcp.mismatch(cfg.run.global_batch_size, settings)
    except ImportError as err:  # no mlperf-logging here (the GPU machine): nothing to check
        return f"RCP table not checked ({err})"


def warn_at_start(cfg) -> None:
    """One `warning:` line on rank 0 when `rcp_warning` finds something."""
    problem = rcp_warning(cfg)
    if problem and os.environ.get("RANK", "0") == "0":
        print(f"warning: {problem}", file=sys.stderr, flush=True)


def package_reference(global_batch_size: int) -> str:
    """Which RCP a package's runs at this global batch are checked against, in one line."""
    try:
        reference, rule = rcp.checked_against(global_batch_size)
    except rcp.RCPError as err:
        return str(err)
    return (
        f"global batch {global_batch_size}: checked against {reference.name} ({rule}): "
        f"mean {reference.mean_samples:,.0f} samples to 0.720; a mean below "
        f"{reference.min_acceptable_mean:,.0f} fails"
    )


def _value(cfg, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)
