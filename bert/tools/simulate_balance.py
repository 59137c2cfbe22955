"""Monte-Carlo of per-rank token counts and host traffic under each balancing strategy.

Every trial draws a global batch of ranks x local-batch lengths (from REFERENCE 2's length
histogram, or from real shards with --shards), deals it with each strategy of
data/order/strategies.py and records the fewest and most real tokens any rank gets ([Kim],
Table 5), the share of samples trained on another node than the one that read them, and the
bytes a rank receives in the host exchange, from the wire format's sizes (data/comm/wire.py;
data/comm/sparse.py for node_swap). The table shows the averages over trials; the spread
(max - min) is what the slowest rank makes every other rank wait for.

    python scripts/simulate_balance.py                       # 8 GPUs, one node
    python scripts/simulate_balance.py --ranks 1024          # [Kim]'s cluster: Table 5
    python scripts/simulate_balance.py --json out.json --plot out.png
    python scripts/simulate_balance.py --ranks-sweep 64,256,1024,4096 --plot sweep.png

--json writes {"setup": {...}, "strategies": {NAME: {"spread_tokens", "max_over_min",
"moved_fraction", "host_bytes_per_rank_per_step", ...}}} and, with --ranks-sweep, "sweep":
{RANKS: {NAME: {...}}}. host_bytes_per_rank_per_step is the most any rank receives from the
others in one step (mean over trials); host_bytes_mean_rank the mean over ranks;
assign_ms_per_step the CPU time one rank spends per step computing the part of the assignment
it needs (every rank does that every step, in its prefetch thread).

Exit status: 0 done, 2 bad arguments or shards (one `error:` line).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bert.core.inputs import Parser, int_arg
from bert.tools.common import git_commit, import_pyplot
from data.comm import sparse
from data.order.lengths import length_pmf, lengths_from_shards, pmf_from_lengths
from data.order.simulate import PUBLISHED_TABLE_5, Simulation, dealt_batches
from data.order.strategies import STRATEGIES, balance, tokens_per_rank

# the setup of [Kim]'s Table 5 (PUBLISHED_TABLE_5)
PUBLISHED_SETUP = {"local_batch": 16, "ranks_per_node": 8, "max_len": 512}

LABELS = {
    "none": "no balancing",
    "stratified": "+ stratification",
    "stratified_local_presort": "+ local presort",
    "stratified_local_snake": "+ snake (local)",
    "global_presort": "global presort",
    "serpentine": "global serpentine",
    "node_swap": "node swap",
    "stratified_node_swap": "+ stratified node swap",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--local-batch", type=int_arg(), default=16, help="samples per rank per step")
    p.add_argument("--ranks", type=int_arg(), default=8, help="data-parallel world size")
    p.add_argument("--ranks-per-node", type=int_arg(), default=8, help="ranks sharing a node")
    p.add_argument("--trials", type=int_arg(), default=1000, help="Monte-Carlo global batches")
    p.add_argument("--max-len", type=int_arg(), default=512, help="maximum sequence length")
    p.add_argument(
        "--max-pred",
        type=int_arg(),
        default=76,
        help="most masked tokens per sample (15 %% of the length, at least 1)",
    )
    p.add_argument("--seed", type=int_arg(), default=0)
    p.add_argument(
        "--shards",
        default=None,
        help="glob of HDF5 shards: draw lengths from them instead of the histogram",
    )
    p.add_argument(
        "--ranks-sweep",
        default=None,
        help="comma-separated world sizes, e.g. 64,256,1024,4096: one more table",
    )
    p.add_argument("--sweep-trials", type=int_arg(), default=100, help="trials per sweep point")
    p.add_argument(
        "--timing-batches",
        type=int_arg(),
        default=5,
        help="single global batches timed for assign_ms_per_step (median)",
    )
    p.add_argument(
        "--plot",
        default=None,
        help="write a PNG: the min..max ranges, or with "
        "--ranks-sweep the spread and host bytes against the world size",
    )
    p.add_argument("--json", default=None, help="write the results (see the docstring)")
    return p.parse_args(argv)


def argument_error(args) -> str | None:
    """Why the numbers describe no cluster, or None (checked before any work)."""
    for name in ("ranks", "local_batch", "ranks_per_node", "trials"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1"
    if args.ranks % min(args.ranks_per_node, args.ranks):
        return (
            f"--ranks={args.ranks} is not a whole number of --ranks-per-node="
            f"{args.ranks_per_node} nodes"
        )
    if args.max_len < 8:  # the length strata need a few lengths each
        return f"--max-len={args.max_len} must be >= 8"
    return sweep_error(args) if args.ranks_sweep else None


def sweep_error(args) -> str | None:
    """Why --ranks-sweep names no list of whole-node world sizes, or None."""
    if args.sweep_trials < 1:
        return f"--sweep-trials={args.sweep_trials} must be >= 1"
    try:
        sizes = [int(w) for w in args.ranks_sweep.split(",")]
    except ValueError:
        return f"--ranks-sweep={args.ranks_sweep!r}: expected comma-separated integers"
    for size in sizes:
        if size < 1 or size % min(args.ranks_per_node, size):
            return (
                f"--ranks-sweep: {size} is not a whole number of --ranks-per-node="
                f"{args.ranks_per_node} nodes"
            )
    return None


def length_distribution(args) -> tuple[np.ndarray, str]:
    """The pmf (max_len+1,) to draw from, and a line saying where it came from."""
    if not args.shards:
        return length_pmf(args.max_len), "REFERENCE 2 histogram"
    lengths = lengths_from_shards(args.shards)
    return (
        pmf_from_lengths(lengths, args.max_len),
        f"{lengths.size} samples from {args.shards} (mean {lengths.mean():.1f})",
    )


# ---------------------------------------------------------------------------------------------
# Measures of one dealt batch
# ---------------------------------------------------------------------------------------------


def masked_counts(lengths: np.ndarray, max_pred: int) -> np.ndarray:
    """Masked tokens per sample as the MLPerf data has them: 15 % of the length rounded (half
    to even, like Python's round), at least 1, at most max_pred."""
    return np.clip(np.rint(0.15 * lengths).astype(np.int64), 1, max_pred)


def exchange_kind(name: str) -> str:
    """How the pipeline exchanges under a strategy (its record): nothing, an all-gather within
    each node or over the world, or the sparse transport (node_swap)."""
    record = STRATEGIES[name]
    if not record.exchanges:
        return "nothing"
    return "sparse" if record.transport == "sparse" else record.scope


def host_bytes(name: str, lengths, masked, assignment, per_node: int) -> np.ndarray:
    """Bytes (T, W) each rank receives from the others in one step (data/comm/host.py's
    all-gather of wire meta rows and payloads; for node_swap, data/comm/sparse.py)."""
    kind = exchange_kind(name)
    trials, world, local = assignment.shape
    if kind == "nothing":
        return np.zeros((trials, world), dtype=np.int64)
    if kind == "sparse":
        return sparse.received_bytes(lengths, masked, assignment)
    wire = sparse.META_BYTES + sparse.payload_bytes(lengths, masked)
    own = wire.reshape(trials, world, local).sum(axis=2)  # what each rank contributes
    group = min(per_node, world) if kind == "node" else world
    total = own.reshape(trials, world // group, group).sum(axis=2, keepdims=True)
    return (total - own.reshape(trials, world // group, group)).reshape(trials, world)


def moved_fraction(assignment: np.ndarray, per_node: int) -> np.ndarray:
    """(T,) share of samples trained on another node than the one that read them."""
    world, local = assignment.shape[-2:]
    per_node = min(per_node, world)
    trained_on = (np.arange(world) // per_node)[:, None]
    return np.mean(assignment // (per_node * local) != trained_on, axis=(-2, -1))


def assign_ms(name: str, batches: np.ndarray, world: int, per_node: int) -> float:
    """Median CPU milliseconds one rank spends per step on the assignment of one global batch
    (lengths (K, W*B)): a node-local strategy deals only its node's batch, a sparse one
    (node_swap) computes only the rows it exchanges (its record's `rows`), the rest the whole
    batch.
    Thread CPU time, so that waiting for a core on a shared machine does not count."""
    kind = exchange_kind(name)
    group = min(per_node, world)
    times = []
    for row in batches:
        start = time.thread_time()
        if kind == "sparse":
            STRATEGIES[name].rows(row, world, per_node, 0)
        elif kind == "node":
            balance(name, row[: group * (row.size // world)], group, group)
        else:
            balance(name, row, world, per_node)
        times.append(time.thread_time() - start)
    return 1e3 * float(np.median(times)) if times else float("nan")


# ---------------------------------------------------------------------------------------------
# Monte-Carlo
# ---------------------------------------------------------------------------------------------


METRICS = (
    "min_tokens",
    "max_tokens",
    "moved_fraction",
    "host_bytes_per_rank_per_step",
    "host_bytes_mean_rank",
)


def simulate(
    world: int,
    args,
    trials: int,
    pmf: np.ndarray,
    strategies=tuple(STRATEGIES),
    chunk_samples: int = 1 << 22,
) -> dict:
    """{strategy: metrics} averaged over trials (docstring). The batches are
    data/order/simulate.py's, so the min/max tokens equal simulate_token_range's for the same
    seed."""
    rpn = args.ranks_per_node
    sums = {s: np.zeros(len(METRICS)) for s in strategies}
    timed = {}
    sim = Simulation(world, args.local_batch, rpn, trials, pmf, strategies, None, chunk_samples)
    for s, batch, a in dealt_batches(sim, np.random.default_rng(args.seed)):
        tok = tokens_per_rank(batch, a)
        got = host_bytes(s, batch, masked_counts(batch, args.max_pred), a, rpn)
        sums[s] += [
            tok.min(axis=-1).sum(),
            tok.max(axis=-1).sum(),
            moved_fraction(a, rpn).sum(),
            got.max(axis=-1).sum(),
            got.mean(axis=-1).sum(),
        ]
        if s not in timed:
            timed[s] = assign_ms(s, batch[: args.timing_batches], world, rpn)
    return {s: _summary(dict(zip(METRICS, v / trials)), timed[s]) for s, v in sums.items()}


def _summary(mean: dict, ms: float) -> dict:
    lo, hi = mean["min_tokens"], mean["max_tokens"]
    return {
        "spread_tokens": hi - lo,
        "max_over_min": hi / lo if lo else float("inf"),
        "moved_fraction": mean["moved_fraction"],
        "host_bytes_per_rank_per_step": mean["host_bytes_per_rank_per_step"],
        "host_bytes_mean_rank": mean["host_bytes_mean_rank"],
        "min_tokens": lo,
        "max_tokens": hi,
        "assign_ms_per_step": ms,
    }


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def format_table(result: dict, args) -> str:
    """[Kim] Table 5 layout plus traffic, and the published numbers where the setup
    matches."""
    setup = {
        "local_batch": args.local_batch,
        "ranks_per_node": args.ranks_per_node,
        "max_len": args.max_len,
    }
    show_pub = setup == PUBLISHED_SETUP and not args.shards
    head = (
        f"{'strategy':26s} {'min tokens':>10s} {'max tokens':>10s} {'max/min':>8s} "
        f"{'spread':>7s} {'moved':>7s} {'host KB':>9s} {'ms/step':>8s}"
    )
    if show_pub:
        head += f"   {'published min/max':>17s} {'spread':>7s}"
    lines = [head, "-" * len(head)]
    for name, r in result.items():
        lo, hi = r["min_tokens"], r["max_tokens"]
        line = (
            f"{name:26s} {lo:10.0f} {hi:10.0f} {hi / lo:8.3f} {hi - lo:7.0f} "
            f"{100 * r['moved_fraction']:6.1f}% "
            f"{r['host_bytes_per_rank_per_step'] / 1e3:9.1f} "
            f"{r['assign_ms_per_step']:8.2f}"
        )
        if show_pub and name in PUBLISHED_TABLE_5:
            plo, phi = PUBLISHED_TABLE_5[name]
            line += f"   {plo:>8d}/{phi:<8d} {phi - plo:7d}"
        lines.append(line)
    lines.append(
        "moved: samples trained on another node than the one that read them; host KB: "
        "the most any rank receives per step; ms/step: one rank's assignment work"
    )
    if show_pub:
        lines.append("published: [Kim] Table 5 (matches this simulation at --ranks 1024)")
    return "\n".join(lines)


SWEEP_COLUMNS = (
    ("spread_tokens", "spread (tokens)", "{:9.1f}"),
    ("moved_fraction", "moved fraction", "{:9.4f}"),
    ("host_bytes_per_rank_per_step", "host KB per rank per step (max)", "{:9.1f}"),
    ("assign_ms_per_step", "assignment ms per rank per step", "{:9.2f}"),
)


def format_sweep(sweep: dict) -> str:
    """One block per measure: strategies down, world sizes across."""
    sizes = list(sweep)
    lines = []
    for key, title, fmt in SWEEP_COLUMNS:
        head = f"{title:34s}" + "".join(f"{w:>9d}" for w in sizes)
        lines += [head, "-" * len(head)]
        for name in sweep[sizes[0]]:
            scale = 1e3 if key.startswith("host_bytes") else 1
            lines.append(
                f"{name:34s}" + "".join(fmt.format(sweep[w][name][key] / scale) for w in sizes)
            )
        lines.append("")
    return "\n".join(lines)


def write_plot(result: dict, path: str, title: str) -> None:
    """Horizontal bars from the mean min to the mean max per strategy ([Kim], Figure 6)."""
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


def write_sweep_plot(sweep: dict, path: str, title: str) -> None:
    """Spread and host bytes per rank against the world size, one line per strategy (the
    same colour in both panels; log scales, as the strategies differ by orders of
    magnitude)."""
    plt = import_pyplot()
    sizes = list(sweep)
    names = list(sweep[sizes[0]])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    panels = (
        ("spread_tokens", "spread: max - min tokens per rank"),
        ("host_bytes_per_rank_per_step", "bytes a rank receives per step (max)"),
    )
    for ax, (key, label) in zip(axes, panels):
        for i, name in enumerate(names):
            values = np.array([sweep[w][name][key] for w in sizes], dtype=float)
            if not np.all(values > 0):
                continue  # nothing exchanged: no point on a log axis
            ax.plot(
                sizes,
                values,
                marker="os^vD<>p"[i % 8],
                color=colors[i % len(colors)],
                linestyle="-" if i % 2 == 0 else "--",
                label=LABELS.get(name, name),
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(w) for w in sizes])
        ax.set_xlabel("ranks")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)  # below: no overlap
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
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
    start = time.perf_counter()
    result = simulate(args.ranks, args, args.trials, pmf)
    elapsed = time.perf_counter() - start
    title = (
        f"{args.ranks} ranks ({args.ranks_per_node}/node) x {args.local_batch} samples, "
        f"max len {args.max_len}, {args.trials} trials"
    )
    print(f"{title}; lengths: {source}; {elapsed:.2f} s")
    print(format_table(result, args))
    out = {
        "setup": {
            "ranks": args.ranks,
            "ranks_per_node": args.ranks_per_node,
            "local_batch": args.local_batch,
            "max_len": args.max_len,
            "max_pred": args.max_pred,
            "trials": args.trials,
            "lengths": source,
            "seed": args.seed,
            "sweep_trials": args.sweep_trials,
            "commit": git_commit(),
            "command": " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "strategies": result,
    }
    sweep = None
    if args.ranks_sweep:
        sizes = [int(w) for w in args.ranks_sweep.split(",")]
        sweep = {w: simulate(w, args, args.sweep_trials, pmf) for w in sizes}
        print(
            f"\nsweep: {args.ranks_per_node}/node x {args.local_batch} samples, "
            f"{args.sweep_trials} trials per point"
        )
        print(format_sweep(sweep))
        out["sweep"] = {str(w): r for w, r in sweep.items()}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if args.plot and sweep:
        write_sweep_plot(
            sweep,
            args.plot,
            f"{args.ranks_per_node} ranks/node x "
            f"{args.local_batch} samples, max len {args.max_len}",
        )
    elif args.plot:
        write_plot(result, args.plot, title)
    return 0
