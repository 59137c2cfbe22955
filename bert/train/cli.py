"""MLPerf BERT pretraining: load a config, build the Trainer, train to the target accuracy.

    open-bert-train                                  # tiny CPU run on synthetic data
    open-bert-train --config NAME_OR_FILE [--set section.key=value ...]
    torchrun --nproc_per_node=8 --no-python open-bert-train \\
        --config bert_large_1x8xa100_lb56_ga1
    open-bert-train --resume auto      # continue from the newest checkpoint
    open-bert-train --eval-only --set run.init_checkpoint=PATH   # starting accuracy

(`python run_pretraining.py ...` in a checkout is the same program.) --config takes a YAML
file, or the bare name of a shipped config (configs/ of the project: tiny_cpu,
bert_large_1x8xa100_lb56_ga1, ...); a file of that name in the current folder wins. Results go
to run.output_dir, relative to the current folder (results/tiny_cpu by default).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from bert.core.inputs import command_parser

EXIT_STATUS = """\
exit status (composes with && and torchrun; the last line says which end it was, and so does
run.json's result.end):
  0    ended as told: the target reached, an eval-only run done, or stopped at the step budget
       you set (run.max_steps / run.max_samples below schedule.total_steps: a smoke test, a
       profile window). A budget stop is no MLPerf result: its log says run_stop aborted and
       the packager refuses it
  1    failed: the schedule ended without reaching the target, a diverged loss, a stalled or
       dead rank, a full disk
  2    bad input (config, data, checkpoint), with one `error:` line naming what is wrong
  143  stopped by SIGTERM at a step boundary (130: SIGINT, 129: SIGHUP, a closed terminal
       or dropped ssh session)
"""

DEFAULT_CONFIG = "tiny_cpu"  # the shipped configs/tiny_cpu.yaml (bert.config.find_config)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(None, __doc__, epilog=EXIT_STATUS)
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help="YAML file or shipped config name (default: %(default)s)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value; repeatable",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines; how the run ended is still printed"
    )
    parser.add_argument(
        "--record-samples",
        metavar="DIR",
        help="audit trail: DIR/rank<R>.txt lists `step shard index` per trained "
        "sample (sets log.record_samples_dir)",
    )
    parser.add_argument(
        "--resume",
        metavar="auto|DIR",
        help="continue from the newest complete checkpoint under the run's "
        "output dir (auto) or from DIR (sets checkpoint.resume)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even if run.output_dir holds a run.json, metrics.jsonl or MLPerf log this "
        "program did not write (refused otherwise): it is kept beside under another name "
        "(NAME.<time>.previous), as an earlier run's is",
    )
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="evaluate the initial weights (run.init_checkpoint) once, report "
        "the MLM accuracy and stop (sets run.eval_only)",
    )
    parser.add_argument(
        "--help-config",
        action="store_true",
        help="list every config key with its type and default, and the value --config "
        "sets where it differs; then the shipped configs, and exit",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (YAML; each key's source as a comment: "
        "default, file, --set or flag), then exit",
    )
    return parser


def main(argv: list[str] | None = None, callbacks=()) -> int:
    """callbacks: bert.train.trainer.Callback objects for the Trainer (tests/faults.py)."""
    args = build_parser().parse_args(argv)
    from bert.config import describe_config, load_config
    from bert.obs.run_record import RunOrigin, config_sources, format_config
    from bert.mlperf.rcp_check import warn_at_start
    from bert.train.exit_status import exit_status, run_end_line, run_end_status

    origin = RunOrigin.from_args(args, argv)  # the overrides --set and the flags stand for
    try:
        cfg = load_config(args.config, origin.overrides)
        if args.help_config:
            print("\n".join(describe_config(args.config, cfg)))
            return 0
        if args.print_config:
            print(format_config(cfg, config_sources(cfg, origin)), end="")
            return 0
        # a --record-samples folder holding an earlier trail: refused by the Trainer, once its
        # Checkpointer has resolved whether the run resumes (one answer, before any write)
        warn_at_start(cfg)  # a closed-division run whose hyperparameters match no RCP
        from data.synthetic import ensure_synthetic_data

        # data preparation, outside the timed MLPerf region
        cfg = dataclasses.replace(cfg, data=ensure_synthetic_data(cfg.data, cfg.model.vocab_size))
        from bert.train.trainer import Trainer

        trainer = Trainer(cfg, callbacks=callbacks, origin=origin, force=args.force)
        result = trainer.train()
    except BaseException as err:
        code = exit_status(err)  # the one `error:` line (once per job), or a signal's status
        if code is None:
            raise  # a crash: its traceback is the report
        return code
    finally:
        # only a process that imported torch.distributed can hold a process group; the others
        # (--help-config, --print-config, a bad config) end without importing torch
        if "torch.distributed" in sys.modules:
            from bert.train.distributed import shutdown_distributed

            shutdown_distributed()
    if trainer.ctx.is_main:
        trainer.progress.result(run_end_line(result.end, result.log_path))
    return run_end_status(result.end)


def command() -> int:
    """The `open-bert-train` console command and `python run_pretraining.py`: main() with
    SIGTERM, SIGINT and SIGHUP stopping the run at the next step boundary (only a process's
    main thread may set the handlers)."""
    from bert.train.stop_signals import install_stop_handlers

    install_stop_handlers()
    return main()


if __name__ == "__main__":  # python -m bert.train.cli (torchrun -m bert.train.cli ...)
    sys.exit(command())
