"""A planned candidate as a config this program runs as is (configs/*.yaml's layout and name)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from bert.core.files import temp_name
from bert.core.inputs import check_path
from bert.plan.planner import Assumptions, Candidate, Cluster, PlanError

PLATFORM_NAMES = {
    "a100-40gb": "A100-SXM4-40GB",
    "a100-80gb": "A100-SXM4-80GB",
    "h100": "H100-SXM5-80GB",
    "h200": "H200-SXM5-141GB",
    "b200": "B200-SXM-180GB",
}


def config_name(cluster: Cluster, candidate: Candidate) -> str:
    """bert_large_<nodes>x<gpus per node>x<system>_lb<micro-batch>_ga<accumulation>"""
    system = "".join(ch for ch in cluster.kind.name.split("-")[0].lower() if ch.isalnum())
    return (
        f"bert_large_{cluster.nodes}x{cluster.gpus_per_node}x{system}"
        f"_lb{candidate.micro_batch}_ga{candidate.accumulation}"
    )


def config_tree(cluster: Cluster, candidate: Candidate, a: Assumptions) -> dict:
    name = config_name(cluster, candidate)
    settings = candidate.hyper.settings
    section = lambda prefix: {
        k.split(".", 1)[1]: v
        for k, v in settings.items()  # noqa: E731
        if k.startswith(prefix + ".")
    }
    platform = PLATFORM_NAMES.get(cluster.kind.name, cluster.kind.name)
    return {
        "model": {"attention": "padded_sdpa"},
        "data": {
            "train_dir": "/data/bert/train",
            "eval_file": "/data/bert/eval/eval_10000.hdf5",
            "max_seq_length": 512,
            "max_predictions_per_seq": 76,
            "balance": "serpentine" if cluster.nodes == 1 else "node_swap",
        },
        "optim": {**section("optim"), "max_grad_norm": 1.0, "sharded": a.sharded},
        "schedule": section("schedule"),
        "run": {
            "global_batch_size": candidate.global_batch_size,
            "gradient_accumulation_steps": candidate.accumulation,
            "precision": a.precision,
            "device": "cuda",
            "seed": -1,
            "init_checkpoint": "/data/bert/phase1/model.ckpt-28252.pt",
            "output_dir": f"results/{name}",
        },
        "eval": {"samples": a.eval_samples, "interval_samples": 0, "batch_size": a.eval_batch},
        "submission": {
            "platform": f"{cluster.nodes}x{cluster.gpus_per_node}x{platform}",
            "division": "closed",
        },
    }


def header(cluster: Cluster, candidate: Candidate) -> str:
    hyper = candidate.hyper
    return "\n".join(
        [
            f"# Written by `open-bert-plan`: {cluster.gpus} x {cluster.kind.name} "
            f"({cluster.nodes} node(s) x {cluster.gpus_per_node}), global batch "
            f"{candidate.global_batch_size} = {cluster.gpus} x {candidate.micro_batch} x "
            f"{candidate.accumulation}.",
            f"# Hyperparameters: {hyper.source}"
            + (" (INTERPOLATED: no RCP of its own)." if hyper.interpolated else "."),
            f"# RCP check: {hyper.reference.name}, {hyper.reference_rule}.",
            f"# Predicted: {candidate.train.score_min:.2f} min to 0.720 (run_start..run_stop) at "
            f"{candidate.samples_per_s:.0f} samples/s; docs/plan.md says how.",
            "# The /data paths are placeholders: override them with --set.",
            "",
        ]
    )


def check_target(path: str) -> None:
    """Before planning: PlanError when `path` could not take the config (an existing file, a
    symlink, a path under a file or in no folder), so a bad --write-config costs no plan."""
    check_path(path, "--write-config", PlanError)
    target = Path(path)
    if target.is_dir():
        return
    if os.path.lexists(target):
        raise PlanError(f"--write-config {path!r}: the file exists; it is left as it is")
    if not target.parent.is_dir():
        raise PlanError(f"--write-config {path!r}: folder {str(target.parent)!r} does not exist")


def write_config(path: str, cluster: Cluster, candidate: Candidate, a: Assumptions) -> Path:
    """Writes the config to `path` (a folder: under its configs' name). Refuses to replace a
    file; written under a temporary name and renamed, so nothing is ever half-written."""
    if not candidate.fits:
        raise PlanError(
            f"global batch {candidate.global_batch_size} does not fit in memory: nothing to write"
        )
    target = Path(path)
    if target.is_dir():
        target = target / f"{config_name(cluster, candidate)}.yaml"
    if target.exists():
        raise PlanError(f"--write-config {str(target)!r}: the file exists; it is left as it is")
    if not target.parent.is_dir():
        raise PlanError(
            f"--write-config {str(target)!r}: folder {str(target.parent)!r} does not exist"
        )
    text = header(cluster, candidate) + yaml.safe_dump(
        config_tree(cluster, candidate, a), sort_keys=False
    )
    # A hidden unique name opened as a new file (not mkstemp: its 0600 mode would stay on the
    # config; this one gets the mode any file the user writes gets, 0666 less the umask).
    temp = temp_name(target)
    try:
        with open(temp, "x") as out:
            out.write(text)
        os.link(temp, target)  # fails if the name appeared meanwhile: never replaces a file
    except FileExistsError:
        raise PlanError(
            f"--write-config {str(target)!r}: the file exists; it is left as it is"
        ) from None
    finally:
        temp.unlink(missing_ok=True)
    return target
