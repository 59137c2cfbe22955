"""Does the fused model train like the reference? Two runs of the training program from the
same seed on the same data, one with the fused switches on, compared step by step.

    python -m bert.tools.gpu.train_compare --device cuda --out train_compare.json   # the window
    python -m bert.tools.gpu.train_compare --device cpu --steps 6 --out t.json      # its twins

Both runs are run_pretraining.py's own entry point on the learnable synthetic shards
(data/synthetic.py: a successor table), one eval at the end:
    reference  the switches off
    fused      every model.fused_* switch valid for the model's erf GeLU (MLPerf's), plus the
               sharded LAMB's fused kernels on CUDA (optim.fused_kernel)
The check (issue 22): the final eval MLM accuracies within ACCURACY_TOLERANCE. The JSON holds
both loss curves (metrics.jsonl, every step) and their largest gap; `--plot` draws them. The
curves agree in distribution, not step for step: the fused LayerNorm draws its own Philox
dropout masks (kernels/reference.py), torch's dropout others.
On the CPU the fused switches run their PyTorch twins, so the CPU run checks the mechanics.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import tempfile
from pathlib import Path

from bert.core.errors import BadInputError
from bert.model import ModelConfig
from bert.model.fused import FUSED_OPS
from bert.obs.sinks import read_records
from bert.tools.common import git_commit, import_pyplot, write_json
from bert.tools.gpu.smoke_train import run, set_args

ACCURACY_TOLERANCE = 0.005  # issue 22: the MLM accuracy at the end within 0.005
SHAPES = {  # the fused kernels' shape limits need width 1024 (bert/model/config.py)
    "cuda": {"model.hidden_size": 1024, "model.num_hidden_layers": 2,
             "model.num_attention_heads": 16, "model.intermediate_size": 4096,
             "model.vocab_size": 30522, "model.max_position_embeddings": 512,
             "model.attention": "flash_varlen", "data.max_seq_length": 128,
             "data.max_predictions_per_seq": 20, "run.global_batch_size": 64,
             "run.precision": "bf16", "eval.batch_size": 128},
    "cpu": {"model.hidden_size": 1024, "model.num_hidden_layers": 1,
            "model.num_attention_heads": 16, "model.intermediate_size": 1024,
            "model.attention": "per_sequence", "run.global_batch_size": 8,
            "run.precision": "fp32", "eval.batch_size": 64, "run.threads": 2},
}


def fused_switches(shape: dict, device: str) -> dict[str, str]:
    """Every fused model flag the shape admits with erf GeLU, one at a time through the
    config's own checks, and the fused LAMB on CUDA."""
    base = ModelConfig(**{k.removeprefix("model."): v for k, v in shape.items()
                          if k.startswith("model.") and k != "model.attention"})
    switches = {}
    for flag in FUSED_OPS:
        try:
            dataclasses.replace(base, **{flag: True})
        except (BadInputError, ValueError):
            continue  # e.g. fused_dense_gelu: tanh GeLU only
        switches[f"model.{flag}"] = "true"
    if device == "cuda":
        switches["optim.fused_kernel"] = "true"
    return switches


def run_args(device: str, work: Path, name: str, steps: int, extra: dict) -> list[str]:
    shape = SHAPES[device]
    values = {**shape, **extra, "run.device": device, "run.seed": 4321,
              "run.output_dir": str(work / name), "optim.sharded": "true",
              "run.max_steps": steps,
              "eval.interval_samples": steps * shape["run.global_batch_size"],
              "eval.samples": 512, "eval.target_mlm_accuracy": 1.0, "log.interval_s": 0,
              "data.synthetic.enabled": "true", "data.synthetic.cache_dir": str(work / "cache"),
              "data.synthetic.num_shards": 2, "data.synthetic.samples_per_shard": 2048,
              "data.synthetic.eval_samples": 512}
    return ["--quiet", *set_args(values)]


def one_run(device: str, work: Path, name: str, steps: int, extra: dict) -> dict:
    result = run(run_args(device, work, name, steps, extra))  # the smoke's: exit, error, time
    metrics = work / name / "metrics.jsonl"
    records = read_records(metrics) if metrics.is_file() else []
    losses = {r["step"]: r["loss"] for r in records if r.get("kind") == "train"}
    evals = [r["eval_mlm_accuracy"] for r in records if r.get("kind") == "eval"]
    return {**result, "switches": extra, "loss_by_step": losses,
            "final_eval_mlm_accuracy": evals[-1] if evals else None}


def compare(reference: dict, fused: dict) -> dict:
    steps = sorted(set(reference["loss_by_step"]) & set(fused["loss_by_step"]))
    gaps = [abs(fused["loss_by_step"][s] - reference["loss_by_step"][s]) for s in steps
            if fused["loss_by_step"][s] is not None and reference["loss_by_step"][s] is not None]
    acc_ref, acc_fused = (reference["final_eval_mlm_accuracy"],
                          fused["final_eval_mlm_accuracy"])
    gap = None if acc_ref is None or acc_fused is None else abs(acc_fused - acc_ref)
    return {"steps_compared": len(steps), "max_loss_gap": max(gaps, default=None),
            "final_loss_gap": gaps[-1] if gaps else None, "accuracy_gap": gap,
            "tolerance": ACCURACY_TOLERANCE,
            "passed": gap is not None and gap <= ACCURACY_TOLERANCE
            and len(gaps) == len(steps) > 0}


def plot(record: dict, path: Path) -> None:
    from bert.obs.figures import save_figure

    plt = import_pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    for name in ("reference", "fused"):
        curve = record["runs"][name]["loss_by_step"]
        steps = sorted(curve, key=int)
        axes.plot([int(s) for s in steps], [curve[s] for s in steps], label=name)
    axes.set(xlabel="step", ylabel="training loss",
             title=f"{record['device']}: fused vs reference "
                   f"(final MLM accuracy gap {record['comparison']['accuracy_gap']})")
    axes.legend()
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=sorted(SHAPES), default="cuda")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True, help="the JSON record")
    parser.add_argument("--plot", type=Path, help="a PNG of both loss curves (matplotlib)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2")
    record = {"device": args.device, "date": dt.datetime.now(dt.timezone.utc)
              .isoformat(timespec="seconds"), "commit": git_commit(),
              "command": " ".join([Path(sys.executable).name, "-m",
                                   "bert.tools.gpu.train_compare", *(argv or sys.argv[1:])]),
              "steps": args.steps, "shape": SHAPES[args.device], "runs": {}}
    if args.device == "cuda":
        import torch

        record["gpu"], record["torch"] = torch.cuda.get_device_name(0), torch.__version__
    with tempfile.TemporaryDirectory(prefix="train-compare-") as tmp:
        work = Path(tmp)
        for name, extra in (("reference", {}),
                            ("fused", fused_switches(SHAPES[args.device], args.device))):
            record["runs"][name] = one_run(args.device, work, name, args.steps, extra)
            write_json(args.out, record)  # a killed comparison keeps the finished run
    record["comparison"] = compare(record["runs"]["reference"], record["runs"]["fused"])
    write_json(args.out, record)
    if args.plot:
        plot(record, args.plot)
    verdict = "passed" if record["comparison"]["passed"] else "FAILED"
    print(f"train_compare ({args.device}): {verdict}: final MLM accuracy gap "
          f"{record['comparison']['accuracy_gap']} (tolerance {ACCURACY_TOLERANCE}), largest "
          f"loss gap {record['comparison']['max_loss_gap']}; {args.out}")
    return 0 if record["comparison"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
