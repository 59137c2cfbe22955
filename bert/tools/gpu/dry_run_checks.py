"""What the GPU window's dry run checks beyond each command's --help (window.py): the one
throughput process's command resolved by the bench's own --dry-run, as on the GPU."""

from __future__ import annotations

import json


def throughput_dry_run(h, step, argv: list[str]) -> None:
    """The command with the bench's own --dry-run, as on the GPU (--device cuda): every flag
    parsed and every variant resolved, nothing built; the variants go into the summary, and
    one the bench would refuse (graphs_refusal) fails the step: it would cost window time for
    nothing."""
    code = h.step(step.name, [*argv, "--device", "cuda", "--dry-run"], step.cap_s, planned=argv)
    lines = (h.work / f"{step.name}.log").read_text().strip().splitlines()
    try:
        listing = json.loads(lines[-1])
    except (IndexError, ValueError):
        return  # the step failed: its log says why
    h.summary["throughput_variants"] = listing["variants"]
    refused = {n: v["refused"] for n, v in listing["variants"].items() if "refused" in v}
    if code == 0 and refused:
        h.summary["steps"][-1].update(status="failed", reason=f"refused variants: {refused}")
        h.write()
