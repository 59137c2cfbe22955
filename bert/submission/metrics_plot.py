"""One PNG of a run's metrics.jsonl (bert/obs/metrics.py): loss, lr, throughput and eval
accuracy against samples trained, one curve per run. scripts/plot_run.py draws it for .jsonl
inputs; matplotlib is imported only here, when drawing."""

from __future__ import annotations

from pathlib import Path

from bert.core.errors import BadInputError
from bert.core.readers import parse_json, read_text
from bert.submission.figures import save_figure

# a run's metrics.jsonl: a few hundred bytes a record, one per progress point (days of a run
# are tens of MB); beyond this it is no metrics file
MAX_METRICS_BYTES = 256 << 20

PANELS = (  # (record kind, field, axis label)
    ("train", "loss", "training loss"),
    ("train", "lr", "learning rate"),
    ("train", "samples_per_s", "samples/s"),
    ("eval", "eval_mlm_accuracy", "eval masked-LM accuracy"),
)


def read_metrics(path: Path) -> list[dict]:
    """The records of one metrics.jsonl; ValueError naming the file and line otherwise."""
    if not path.is_file():
        raise ValueError(f"{path}: no such metrics file")
    records = []
    text = read_text(path, "metrics file", BadInputError, max_bytes=MAX_METRICS_BYTES)
    for number, line in enumerate(text.splitlines(), 1):
        record = parse_json(line, f"{path}: line {number}", BadInputError)
        if not isinstance(record, dict) or "kind" not in record or "samples" not in record:
            raise ValueError(f"{path}: line {number} is not a metrics record")
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def series(records: list[dict], kind: str, field: str) -> tuple[list[int], list[float]]:
    """(samples, value) of every record of `kind` where `field` has a value (not null)."""
    points = [
        (r["samples"], r[field]) for r in records if r["kind"] == kind and r.get(field) is not None
    ]
    return [p[0] for p in points], [p[1] for p in points]


def draw_metrics(paths: list[Path], labels: list[str], out: Path, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    runs = [read_metrics(path) for path in paths]  # every file read before anything is drawn
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (kind, field, label) in zip(axes.flat, PANELS):
        for records, name in zip(runs, labels):
            ax.plot(
                *series(records, kind, field), marker="." if kind == "train" else "o", label=name
            )
        if field == "eval_mlm_accuracy":
            ax.axhline(target, color="gray", linestyle="--", label=f"target {target}")
        ax.set(xlabel="samples trained", ylabel=label, title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, out)
