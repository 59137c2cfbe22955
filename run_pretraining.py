"""MLPerf BERT pretraining: load a config, build the Trainer, train to the target accuracy.

    python run_pretraining.py                                   # tiny CPU run on synthetic data
    python run_pretraining.py --config configs/NAME.yaml [--set section.key=value ...]
    torchrun --nproc_per_node=8 run_pretraining.py --config configs/bert_large_1x8xa100_lb56_ga1.yaml
    python run_pretraining.py --resume auto      # continue from the newest checkpoint
    python run_pretraining.py --eval-only --set run.init_checkpoint=PATH   # starting accuracy

Exit status: 0 target reached (or eval-only done), 1 not reached or failed (a stalled rank, a
diverged loss), 2 bad input (config, data, checkpoint), with one line naming what is wrong;
143 / 130: stopped by SIGTERM / SIGINT at a step boundary.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = ROOT / "configs" / "tiny_cpu.yaml"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(DEFAULT_CONFIG),
                        help="YAML config (default: %(default)s)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value; repeatable")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines; how the run ended is still printed")
    parser.add_argument("--record-samples", metavar="DIR",
                        help="audit trail: DIR/rank<R>.txt lists `step shard index` per trained "
                             "sample (sets log.record_samples_dir)")
    parser.add_argument("--resume", metavar="auto|DIR",
                        help="continue from the newest complete checkpoint under the run's "
                             "output dir (auto) or from DIR (sets checkpoint.resume)")
    parser.add_argument("--eval-only", action="store_true",
                        help="evaluate the initial weights (run.init_checkpoint) once, report "
                             "the MLM accuracy and stop (sets run.eval_only)")
    parser.add_argument("--help-config", action="store_true",
                        help="list every config key with its type and default, then exit")
    return parser


def main(argv: list[str] | None = None, callbacks=()) -> int:
    """callbacks: bert.train.trainer.Callback objects for the Trainer (tests/faults.py)."""
    args = build_parser().parse_args(argv)
    from bert.config import describe_fields, load_config
    from bert.plan.check import warn_at_start
    from bert.train.exit_status import exit_status

    if args.help_config:
        print("\n".join(describe_fields()))
        return 0
    overrides = args.set + (["log.quiet=true"] if args.quiet else [])
    if args.record_samples:
        overrides.append(f"log.record_samples_dir={args.record_samples}")
    if args.resume:
        overrides.append(f"checkpoint.resume={args.resume}")
    if args.eval_only:
        overrides.append("run.eval_only=true")
    try:
        cfg = load_config(args.config, overrides)
        warn_at_start(cfg)  # a closed-division run whose hyperparameters match no RCP
        from data.synthetic import ensure_synthetic_data
        # data preparation, outside the timed MLPerf region
        cfg = dataclasses.replace(cfg, data=ensure_synthetic_data(cfg.data,
                                                                  cfg.model.vocab_size))
        from bert.train.trainer import Trainer
        trainer = Trainer(cfg, callbacks=callbacks)
        result = trainer.train()
    except BaseException as err:
        code = exit_status(err)  # the one `error:` line (once per job), or a signal's status
        if code is None:
            raise  # a crash: its traceback is the report
        return code
    finally:
        from bert.train.distributed import shutdown_distributed
        shutdown_distributed()
    if trainer.ctx.is_main:
        print(f"MLPerf log: {result.log_path}  (check it with: python scripts/check_compliance.py "
              f"{result.log_path})")
    return 0 if result.status in ("success", "eval_only") else 1


if __name__ == "__main__":
    from bert.train.stop_signals import install_stop_handlers
    install_stop_handlers()  # SIGTERM, SIGINT: stop at the next step boundary
    sys.exit(main())
