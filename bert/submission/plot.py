"""Plot MLPerf BERT runs: eval accuracy against samples trained, and training throughput over
time (samples/s of each block between evals, so eval time is excluded).

    open-bert-plot results/run                  # its mlperf.log -> results/run/accuracy.png
    open-bert-plot results/run/mlperf.log [MORE_LOGS...] --out run.png
    open-bert-plot results/run/metrics.jsonl [MORE...] --out metrics.png

A run folder stands for its mlperf.log. Without --out the image goes beside the first input:
accuracy.png for MLPerf logs, metrics.png for metrics.jsonl files.

Given metrics.jsonl files (the run's metrics stream), it plots loss, lr, throughput and eval
accuracy against samples trained instead (bert/submission/metrics_plot.py).

Each curve is labelled by its run folder (results/run_3/mlperf.log: run_3), with as many parent
folders as it takes to tell the runs apart, and the log's file name when it is not mlperf.log.

Reading the logs needs only mlperf-logging; drawing needs matplotlib
(pip install 'open-bert-mlperf[plot]').
Exit status: 0 written, 2 bad input or matplotlib missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from bert.core.errors import install_hint
from bert.mlperf import constants as C
from bert.mlperf.constants import LOG_NAME, TARGET_MLM_ACCURACY as TARGET
from bert.core.files import real_path
from bert.core.inputs import check_output_path, command_parser
from bert.submission.reader import LogError, parse_log
from bert.submission.figures import save_figure


def read_lines(path: Path) -> list:
    try:
        lines, errors = parse_log(path)
    except (LogError, OSError) as err:
        raise ValueError(str(err)) from None
    if errors or not lines:
        raise ValueError(f"{path}: {len(errors)} unparsable MLLOG line(s), {len(lines)} parsed")
    return lines


def eval_curve(lines: list) -> tuple[list[int], list[float]]:
    """(samples trained, MLM accuracy) at each eval; epoch_num is samples for BERT."""
    points = [
        (_number(line, line.value["metadata"].get(C.EPOCH_NUM)), _number(line, line.value["value"]))
        for line in lines
        if line.key == C.EVAL_ACCURACY
    ]
    return [p[0] for p in points], [p[1] for p in points]


def block_throughput(lines: list) -> tuple[list[float], list[float]]:
    """(minutes since run_start at each block's end, samples/s within the block)."""
    start = next((line.timestamp for line in lines if line.key == C.RUN_START), None)
    minutes, rates, opened = [], [], None
    for line in lines:
        if line.key == C.BLOCK_START:
            opened = line
        elif line.key == C.BLOCK_STOP and opened is not None and start is not None:
            seconds = (line.timestamp - opened.timestamp) / 1000
            count = _number(opened, opened.value["metadata"].get(C.EPOCH_COUNT, 0))
            if seconds > 0:
                minutes.append((line.timestamp - start) / 60_000)
                rates.append(count / seconds)
            opened = None
    return minutes, rates


def _number(line, found) -> float:
    """A value the plot needs as a number; ValueError (one `error:` line) otherwise."""
    if not isinstance(found, (int, float)) or isinstance(found, bool):
        raise ValueError(f"line {line.lineno + 1} ({line.key}): {found!r} is not a number")
    return found


def curve_labels(logs: list[Path]) -> list[str]:
    """One label per log naming its run folder; the shallowest that tells them apart."""
    resolved = [real_path(path) for path in logs]
    for depth in range(1, max(len(path.parts) for path in resolved)):
        labels = [_folder_label(path, depth) for path in resolved]
        if len(set(labels)) == len(labels):
            return labels
    return [str(path) for path in logs]  # the same log given twice


def _folder_label(path: Path, depth: int) -> str:
    folder = "/".join(path.parent.parts[-depth:])
    # every run writes mlperf.log, so the folder is the name; a resumed log or a collected
    # result_N.txt keeps its own name
    return folder if path.name == LOG_NAME else f"{folder}/{path.name}"


def draw(logs: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    curves = []
    for path in logs:  # every log read before a figure opens: a bad one leaves none behind
        lines = read_lines(path)
        curves.append((eval_curve(lines), block_throughput(lines)))
    fig, (acc_ax, rate_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (accuracy, rate), label in zip(curves, curve_labels(logs)):
        acc_ax.plot(*accuracy, marker="o", label=label)
        rate_ax.plot(*rate, marker=".", label=label)
    acc_ax.axhline(TARGET, color="gray", linestyle="--", label=f"target {TARGET}")
    acc_ax.set(xlabel="samples trained", ylabel="masked-LM accuracy", title="eval accuracy")
    rate_ax.set(
        xlabel="minutes since run_start", ylabel="samples/s", title="training throughput per block"
    )
    for ax in (acc_ax, rate_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, out)


def default_out(logs: list[Path]) -> Path:
    """Beside the first input, named for what is drawn."""
    metrics = all(path.suffix == ".jsonl" for path in logs)
    return logs[0].parent / ("metrics.png" if metrics else "accuracy.png")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("open-bert-plot", __doc__)
    parser.add_argument(
        "logs",
        nargs="+",
        type=Path,
        help="MLPerf logs, run folders (their mlperf.log) or metrics.jsonl files",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="image file (default: accuracy.png or metrics.png beside the first input)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print(f"error: open-bert-plot needs matplotlib: {install_hint('plot')}", file=sys.stderr)
        return 2
    try:
        args.logs = [path / LOG_NAME if path.is_dir() else path for path in args.logs]
        args.out = args.out or default_out(args.logs)
        check_output_path(args.out, "--out", folder=False)  # before a log is read
        if all(path.suffix == ".jsonl" for path in args.logs):  # metrics streams
            from bert.submission.metrics_plot import draw_metrics

            draw_metrics(args.logs, curve_labels(args.logs), args.out, TARGET)
        else:
            draw(args.logs, args.out)
    except (ValueError, OSError) as err:  # bad input (LogError too), or the image unwritable
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0
