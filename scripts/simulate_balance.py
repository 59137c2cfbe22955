"""Monte-Carlo of per-rank token counts under each balancing strategy (seed 001, Table 5).

Every trial draws a global batch of ranks x local-batch lengths (from REFERENCE 2's length
histogram, or from real shards with --shards), deals it with each strategy of
data/order/strategies.py and records the fewest and most real tokens any rank gets. The table shows the averages over
trials; the spread (max - min) is what the slowest rank makes every other rank wait for.

    python scripts/simulate_balance.py                       # 8 GPUs, one node
    python scripts/simulate_balance.py --ranks 1024          # seed 001's cluster: Table 5
    python scripts/simulate_balance.py --json out.json --plot out.png

Exit status: 0 done, 2 bad arguments or shards (one `error:` line).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# runnable as `python scripts/simulate_balance.py` from the repo root without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.script_utils import import_pyplot  # noqa: E402 (needs the path above)

import numpy as np  # noqa: E402

from data.order.lengths import length_pmf, lengths_from_shards, pmf_from_lengths  # noqa: E402
from data.order.simulate import simulate_token_range  # noqa: E402

# Seed 001, appendix C.2, Table 5: mean min / max tokens per GPU, 16 samples per GPU, 8 GPUs per
# node, max length 512. The GPU count is not stated; these numbers come out of this simulation
# at 1024 GPUs (their 128-node cluster), not at 8 or 64.
PUBLISHED_TABLE_5 = {
    "none": (1886, 6459),
    "stratified": (3620, 4482),
    "stratified_local_presort": (3743, 4401),
    "stratified_local_snake": (3900, 4246),
    "global_presort": (3807, 4313),
}
PUBLISHED_SETUP = {"local_batch": 16, "ranks_per_node": 8, "max_len": 512}

LABELS = {
    "none": "no balancing",
    "stratified": "+ stratification",
    "stratified_local_presort": "+ local presort",
    "stratified_local_snake": "+ snake (local)",
    "global_presort": "global presort",
    "serpentine": "global serpentine",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--local-batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--ranks", type=int, default=8, help="data-parallel world size")
    p.add_argument("--ranks-per-node", type=int, default=8, help="ranks sharing a node")
    p.add_argument("--trials", type=int, default=1000, help="Monte-Carlo global batches")
    p.add_argument("--max-len", type=int, default=512, help="maximum sequence length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", default=None,
                   help="glob of HDF5 shards: draw lengths from them instead of the histogram")
    p.add_argument("--plot", default=None, help="write a PNG of the min..max ranges")
    p.add_argument("--json", default=None, help="write {strategy: {min_tokens, max_tokens}}")
    return p.parse_args(argv)


def argument_error(args) -> str | None:
    """Why the numbers describe no cluster, or None (checked before any work)."""
    for name in ("ranks", "local_batch", "ranks_per_node", "trials"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1"
    if args.ranks % min(args.ranks_per_node, args.ranks):
        return (f"--ranks={args.ranks} is not a whole number of --ranks-per-node="
                f"{args.ranks_per_node} nodes")
    if args.max_len < 8:  # the length strata need a few lengths each
        return f"--max-len={args.max_len} must be >= 8"
    return None


def length_distribution(args) -> tuple[np.ndarray, str]:
    """The pmf (max_len+1,) to draw from, and a line saying where it came from."""
    if not args.shards:
        return length_pmf(args.max_len), "REFERENCE 2 histogram"
    lengths = lengths_from_shards(args.shards)
    return (pmf_from_lengths(lengths, args.max_len),
            f"{lengths.size} samples from {args.shards} (mean {lengths.mean():.1f})")


def format_table(result: dict, args) -> str:
    """Seed 001 Table 5 layout, plus the published numbers where the setup matches."""
    setup = {"local_batch": args.local_batch, "ranks_per_node": args.ranks_per_node,
             "max_len": args.max_len}
    show_pub = setup == PUBLISHED_SETUP and not args.shards
    head = (f"{'strategy':26s} {'min tokens':>10s} {'max tokens':>10s} {'max/min':>8s} "
            f"{'spread':>7s}")
    if show_pub:
        head += f"   {'published min/max':>17s} {'spread':>7s}"
    lines = [head, "-" * len(head)]
    for name, r in result.items():
        lo, hi = r["min_tokens"], r["max_tokens"]
        line = f"{name:26s} {lo:10.0f} {hi:10.0f} {hi / lo:8.3f} {hi - lo:7.0f}"
        if show_pub and name in PUBLISHED_TABLE_5:
            plo, phi = PUBLISHED_TABLE_5[name]
            line += f"   {plo:>8d}/{phi:<8d} {phi - plo:7d}"
        lines.append(line)
    if show_pub:
        lines.append("published: seed 001 Table 5 (matches this simulation at --ranks 1024)")
    return "\n".join(lines)


def write_plot(result: dict, path: str, title: str) -> None:
    """Horizontal bars from the mean min to the mean max per strategy (seed 001, Figure 6)."""
    plt = import_pyplot()
    names = list(result)
    lo = np.array([result[n]["min_tokens"] for n in names])
    hi = np.array([result[n]["max_tokens"] for n in names])
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.5))
    ax.barh(range(len(names)), hi - lo, left=lo, color="tab:blue")
    ax.set_yticks(range(len(names)), [LABELS.get(n, n) for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("real tokens per rank (mean min .. mean max)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    problem = argument_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.plot:
        import_pyplot()  # fail before the simulation, not after it
    try:
        pmf, source = length_distribution(args)
    except (OSError, KeyError, ValueError) as err:  # h5py: missing or non-HDF5 shards
        print(f"error: --shards {args.shards}: {err}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    result = simulate_token_range(args.ranks, args.local_batch, args.ranks_per_node,
                                  args.trials, rng, pmf)
    elapsed = time.perf_counter() - start
    title = (f"{args.ranks} ranks ({args.ranks_per_node}/node) x {args.local_batch} samples, "
             f"max len {args.max_len}, {args.trials} trials")
    print(f"{title}; lengths: {source}; {elapsed:.2f} s")
    print(format_table(result, args))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.plot:
        write_plot(result, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
