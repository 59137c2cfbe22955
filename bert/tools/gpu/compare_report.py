"""train_compare's record in words and in a figure: the verdict line it prints and the plot of
the runs' loss curves (bert/tools/gpu/train_compare.py)."""

from __future__ import annotations

from pathlib import Path

from bert.tools.common import import_pyplot


def plot(record: dict, path: Path) -> None:
    from bert.submission.figures import save_figure

    plt = import_pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    for name, trained in record["runs"].items():  # reference, fused, reseeded reference
        curve = trained["loss_by_step"]
        steps = sorted(curve, key=int)
        axes.plot([int(s) for s in steps], [curve[s] for s in steps], label=name, linewidth=1)
    comparison = record["comparison"]
    axes.set(
        xlabel="step",
        ylabel="training loss",
        title=f"{record['device']}: fused vs reference (tail mean loss "
        f"{shown_fraction(comparison['tail_mean_loss']['relative_gap'])} apart, final MLM "
        f"accuracy gap {comparison['accuracy_gap']})",
    )
    axes.legend()
    save_figure(figure, path)


def shown_fraction(value: float | None) -> str:
    return "none" if value is None else f"{value:.2%}"


def shown_loss(value: float | None) -> str:
    return "none" if value is None else f"{value:.4f}"


def verdict_line(device: str, comparison: dict, out: Path) -> str:
    accuracies = comparison["accuracies"]
    shown = ", ".join(f"{name} {shown_loss(a)}" for name, a in accuracies.items())
    head = "passed" if comparison["passed"] else f"FAILED: {'; '.join(comparison['failures'])}"
    tail, step_gap = comparison["tail_mean_loss"], comparison["step_gap"]
    return (
        f"train_compare ({device}): {head}. Final MLM accuracy {shown} (floor "
        f"{comparison['min_accuracy']}), gap {comparison['accuracy_gap']} (tolerance "
        f"{comparison['tolerance']}); mean loss over the last {tail['steps']} steps reference "
        f"{shown_loss(tail['reference'])}, fused {shown_loss(tail['fused'])}: "
        f"{shown_fraction(tail['relative_gap'])} apart (tolerance {tail['tolerance']:.0%}); "
        f"largest {step_gap['window']}-step mean loss gap {shown_loss(step_gap['largest'])} "
        f"(bound {shown_loss(step_gap['bound'])}: {bound_source(step_gap['spread'])}); {out}"
    )


def bound_source(spread: dict) -> str:
    """Where the step-gap bound came from, in words: the reseeded reference, or as stated."""
    if spread["multiple"] is None:
        return f"stated, {spread['from']}"
    return (
        f"{spread['multiple']} times the reseeded reference's {shown_loss(spread['largest_gap'])}"
    )
