"""Held-out validation of the scale model (docs/plan.md, "Against published results").

    python -m bert.plan.validate                    # the table, as markdown
    python -m bert.plan.validate --write docs/plan.md   # replace the table in the docs

Scored: every result of bert/plan/published_results.json on 8 or more GPUs that is neither in
the training subset (`fit.training_rows`: rounds v3.0 and v3.1) nor a calibration point (the
kind's default, bert/core/gpus.py). Each is predicted through the CLI as a user runs it,
`open-bert-plan --gpus G --gpus-per-node n --gpu KIND --batch B [--sharp]
[--nics-per-node N --nic-gbps RATE] --json`, the network flags as the result's submission
records them (bert/plan/network.py), with the default calibration (one published 8-GPU
result per kind), so the prediction includes the RCPs' samples to converge at that batch, not
the samples the result took. The score is within 15% of the olympic mean of the result's
run_start..run_stop minutes.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from bert.core import gpus
from bert.core.inputs import command_parser
from bert.plan import fit, network, scale

WITHIN = 0.15  # the targets' "within 15%"
BANDS = (("8 GPUs", 8, 8), ("16-256 GPUs", 16, 256), ("512+ GPUs", 512, 10**9))
BEGIN = "<!-- held-out table: python -m bert.plan.validate --write docs/plan.md -->"
END = "<!-- end of held-out table -->"


def _params() -> int:
    """BERT-Large's parameter count (counted once per process, bert/plan/memory.py)."""
    from bert.model.config import ModelConfig
    from bert.plan.memory import parameter_count

    return parameter_count(ModelConfig())


def calibration_ids() -> set[str]:
    return {k.calibration for k in gpus.GPUS.values() if k.calibration}


def held_out(rows: list[dict] | None = None) -> list[dict]:
    rows = scale.published_results() if rows is None else rows
    skip = calibration_ids() | {scale.row_id(r) for r in fit.training_rows(rows)}
    return [
        r
        for r in rows
        if r["gpus"] >= 8 and r["round"] not in fit.TRAINING_ROUNDS and scale.row_id(r) not in skip
    ]


def argv_for(row: dict) -> list[str]:
    """The command line a user with this cluster runs."""
    return [
        "--gpus",
        str(row["gpus"]),
        "--gpus-per-node",
        str(row["gpus_per_node"]),
        "--gpu",
        row["gpu"],
        "--batch",
        str(row["global_batch_size"]),
        *network.cli_args(scale.row_id(row)),
        "--json",
    ]


def predict(row: dict) -> tuple[float, float] | None:
    """(the CLI's predicted minutes, its calibrated R); None where it refused."""
    from bert.plan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        if main(argv_for(row)) != 0:
            return None
    plan = json.loads(out.getvalue())
    peak = plan["assumptions"]["scale_model"]["peak_samples_per_s"]
    return plan["candidates"][0]["minutes"]["mean"], peak


def own_samples_error(row: dict, peak: float) -> float:
    """The time model's error alone: the same R and step, with the samples and evals the result
    took instead of the RCP's (so the RCPs' convergence is not in it)."""
    from bert.plan.planner import row_topology

    topo = row_topology(gpus.lookup(row["gpu"]), row)
    train, evals = scale.predicted_seconds(row, _params(), topo, peak)
    return (train + evals) / (row["olympic_mean_minutes"] * 60) - 1


def table() -> list[dict]:
    rows = []
    for r in held_out():
        found = predict(r)
        predicted, error, own = None, None, None
        if found is not None:
            predicted = found[0]
            error = predicted / r["olympic_mean_minutes"] - 1
            own = own_samples_error(r, found[1])
        rows.append({**r, "predicted_minutes": predicted, "error": error, "own_error": own})
    return sorted(rows, key=lambda r: (r["gpus"], r["gpu"], r["round"], scale.row_id(r)))


def _within(rows: list[dict]) -> int:
    return sum(1 for r in rows if r["error"] is not None and abs(r["error"]) <= WITHIN)


def summary(rows: list[dict]) -> dict:
    """Within 15% / scored: all, by scale band and by GPU kind."""
    out = {"all": (_within(rows), len(rows))}
    for name, low, high in BANDS:
        band = [r for r in rows if low <= r["gpus"] <= high]
        out[name] = (_within(band), len(band))
    for kind in sorted({r["gpu"] for r in rows}):
        of_kind = [r for r in rows if r["gpu"] == kind]
        out[kind] = (_within(of_kind), len(of_kind))
    return out


def targets(rows: list[dict]) -> list[str]:
    """The targets, each with what the rows give: at least 80% of the held-out results within
    15%, and at least half of those on 512+ GPUs."""
    s = summary(rows)
    ok, n = s["all"]
    eight = s[BANDS[0][0]]
    big_ok, big_n = s[BANDS[-1][0]]

    def met(good: bool) -> str:
        return "met" if good else "not met"

    return [
        f"- within 15% on at least 80% of the held-out results: {met(ok >= 0.8 * n)}, {ok} of "
        f"{n} ({ok - eight[0]} of {n - eight[1]} without the 8-GPU results, which are of a "
        f"kind calibrated at 8 GPUs)",
        f"- within 15% on at least half of those on 512+ GPUs: "
        f"{met(big_n > 0 and big_ok >= big_n / 2)}, {big_ok} of {big_n}",
    ]


def in_sample(rows: list[dict]) -> str:
    """One line on the training subset's own fit (not a validation)."""
    errors = fit.in_sample_errors(rows, _params())
    big = ", ".join(f"{r['gpu']} x{r['gpus']} {e:+.1%}" for r, e in errors if r["gpus"] >= 512)
    ok = sum(1 for _, e in errors if abs(e) <= WITHIN)
    return (
        f"In-sample (the training subset, with the samples each result took): {ok} of "
        f"{len(errors)} within 15%; on 512+ GPUs: {big}."
    )


def refitted_at_scale(rows: list[dict]) -> str:
    """One line on the training subset's 512+ results predicted by constants refitted without
    them: out-of-sample evidence at the scale the held-out rounds hardly reach."""
    errors = fit.refit_errors_at_scale(rows, _params(), BANDS[-1][1])

    def listed(i: int) -> str:
        ok = sum(1 for e in errors if abs(e[i]) <= WITHIN)
        each = ", ".join(f"{e[0]['gpu']} x{e[0]['gpus']} {e[i]:+.1%}" for e in errors)
        return f"{each} ({ok} of {len(errors)} within 15%)"

    return (
        "Refitted without them (`fit.refit_errors_at_scale`, the samples each result took): "
        f"the training subset's 512+ results, each left out alone: {listed(1)}; all left "
        f"out together: {listed(2)}."
    )


def markdown(rows: list[dict]) -> str:
    s = summary(rows)
    published = scale.published_results()
    k = scale.FITTED
    lines = [
        BEGIN,
        "",
        f"Constants (fitted by `python -m bert.plan.fit`): overhead {k.overhead_samples:g} "
        f"samples per step, eval speed {k.eval_speed:g} x R, hidden share of the backward "
        f"{k.hidden:g}. {in_sample(published)}",
        "",
        refitted_at_scale(published),
        "",
        "Targets:",
        "",
        *targets(rows),
        "",
        "| held-out results | within 15% | scored |",
        "|---|---|---|",
        *(f"| {name} | {ok} | {n} |" for name, (ok, n) in s.items()),
        "",
        "| submitter, system | round | GPU | GPUs | batch | NICs per node | SHARP | published min "
        "| predicted min | error | error, own samples | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pred = "refused" if r["predicted_minutes"] is None else f"{r['predicted_minutes']:.3f}"
        err = "-" if r["error"] is None else f"{r['error']:+.1%}"
        own = "-" if r["own_error"] is None else f"{r['own_error']:+.1%}"
        nics, sharp = network.labels(scale.row_id(r))
        lines.append(
            f"| {r['submitter']}, {r['system']} | {r['round']} | {r['gpu']} | {r['gpus']} | "
            f"{r['global_batch_size']} | {nics} | {sharp} | {r['olympic_mean_minutes']:.3f} | "
            f"{pred} | {err} | {own} | `{r['source']}` |"
        )
    return "\n".join([*lines, "", END])


def replace_block(text: str, block: str) -> str:
    """`text` with the part from BEGIN to END replaced by `block` (ValueError: no such part)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no held-out table between {BEGIN!r} and {END!r}")
    return text[:start] + block + text[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    p = command_parser("python -m bert.plan.validate", __doc__)
    p.add_argument("--write", metavar="DOC", help="replace the held-out table in DOC")
    args = p.parse_args(argv)
    if args.write is None:
        print(markdown(table()))
        return 0
    from bert.core.files import write_text_atomic

    try:  # the doc is read and checked before the predictions are run
        text = Path(args.write).read_text()
        replace_block(text, "")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"error: {args.write}: {err}", file=sys.stderr)
        return 2
    write_text_atomic(args.write, replace_block(text, markdown(table())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
