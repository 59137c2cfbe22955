"""MLPerfLogger output against the official training 5.0.0 compliance checker.

The checker runs as a subprocess (through scripts/check_compliance.py), so these tests check the
real rules in mlperf_logging/compliance_checker/training_5.0.0/, not a copy of them.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # plain `pytest` does not put the project root on the path
    sys.path.insert(0, str(ROOT))

from bert.config import Config  # noqa: E402
from bert.mlperf.writer import MLPerfLogError, MLPerfLogger, hyperparameter_values  # noqa: E402
from bert.train.run_shape import RunShape  # noqa: E402

CHECK_SCRIPT = ROOT / "scripts" / "check_compliance.py"
# MLPerf BERT target: masked-LM accuracy >= 0.720 (REFERENCE.md section 1; closed_bert.yaml).
TARGET = 0.720
BLOCK = 150_000  # eval spacing for GBS <= 2048 (REFERENCE.md section 1)
SEED = 1234


def shape(cfg: Config) -> RunShape:
    """The run shape of `cfg` on one 8-GPU node."""
    return RunShape.build(cfg, 8)


def start_run(log: MLPerfLogger, cfg: Config) -> None:
    log.cache_clear(True)
    log.init_start()
    log.submission_info(
        cfg.submission.org, cfg.submission.platform, cfg.submission.division, cfg.submission.status
    )
    log.hyperparameters(
        cfg, shape(cfg), train_samples=156_725_653, eval_samples=cfg.eval.samples, seed=SEED
    )
    log.init_stop()
    log.run_start()


def train_blocks(log: MLPerfLogger, accuracies: list[float]) -> None:
    """One block of BLOCK samples, then an eval, per accuracy."""
    for i, accuracy in enumerate(accuracies):
        first = i * BLOCK
        log.block_start(samples_count=first, first_epoch_num=first, epoch_count=BLOCK)
        log.block_stop(samples_count=first, first_epoch_num=first, epoch_count=BLOCK)
        trained = first + BLOCK
        log.eval_start(trained)
        log.eval_stop(trained)
        log.eval_accuracy(accuracy, trained)


def write_run(path: Path, accuracies: list[float], rank: int = 0) -> Path:
    """A short fake run: init, hyperparameters, one block + eval per accuracy, run_stop."""
    with MLPerfLogger(str(path), rank=rank) as log:
        start_run(log, Config())
        train_blocks(log, accuracies)
        reached = max(accuracies) >= TARGET
        log.run_stop("success" if reached else "aborted")
    return path


def check(*paths: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECK_SCRIPT), *map(str, paths), *extra],
        capture_output=True,
        text=True,
        check=False,
        cwd=paths[0].parent,
    )


def records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in lines if ":::MLLOG" in line]


def without_key(src: Path, dst: Path, key: str) -> Path:
    kept = [
        line for line in src.read_text().splitlines(keepends=True) if f'"key": "{key}"' not in line
    ]
    dst.write_text("".join(kept))
    return dst


# (a) --------------------------------------------------------------------------------------


def test_compliant_run_passes_checker(tmp_path):
    log = write_run(tmp_path / "result_0.txt", [0.5, 0.73])
    proc = check(log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PASS {log}" in proc.stdout
    # The checker must not leave its report file in the caller's folder.
    assert not (tmp_path / "compliance_checker.log").exists()


def test_compliant_log_contents(tmp_path):
    log = write_run(tmp_path / "result_0.txt", [0.5, 0.73])
    recs = records(log)
    by_key = {}
    for rec in recs:
        by_key.setdefault(rec["key"], []).append(rec)
    cfg = Config()
    assert by_key["opt_base_learning_rate"][0]["value"] == cfg.optim.lr
    assert by_key["seed"][0]["value"] == SEED
    assert by_key["submission_benchmark"][0]["value"] == "bert"
    # epoch_num of eval_accuracy is samples trained so far (REFERENCE.md section 1).
    assert [r["metadata"]["epoch_num"] for r in by_key["eval_accuracy"]] == [BLOCK, 2 * BLOCK]
    assert by_key["run_stop"][0]["metadata"]["status"] == "success"
    # The caller's location (this file), not the wrapper's, is recorded.
    assert by_key["init_start"][0]["metadata"]["file"].endswith("test_mlperf.py")


# (b) --------------------------------------------------------------------------------------


def test_run_below_target_fails_checker(tmp_path):
    log = write_run(tmp_path / "result_0.txt", [0.5, 0.70])
    proc = check(log)
    assert proc.returncode != 0
    assert f"FAIL {log}" in proc.stdout
    assert "eval_accuracy" in proc.stdout  # the checker's reason is passed through


# (c) --------------------------------------------------------------------------------------

REQUIRED_ONCE = [
    "seed",
    "global_batch_size",
    "gradient_accumulation_steps",
    "opt_base_learning_rate",
    "opt_lamb_epsilon",
    "opt_learning_rate_training_steps",
    "opt_learning_rate_warmup_steps",
    "num_warmup_steps",
    "start_warmup_step",
    "opt_lamb_beta_1",
    "opt_lamb_beta_2",
    "opt_lamb_weight_decay_rate",
    "train_samples",
    "eval_samples",
]


# `seed` is not in the compliance checker's 5.0.0 rules; the package checker's seed checker
# enforces it instead (see test_missing_seed_fails_seed_checker).
REQUIRED_BY_COMPLIANCE = [key for key in REQUIRED_ONCE if key != "seed"]


def test_logger_emits_every_required_hyperparameter():
    assert set(REQUIRED_ONCE) <= set(hyperparameter_values(Config(), shape(Config()), 1, 1, 1))


def test_the_logged_batch_is_the_run_shapes():
    """global_batch_size and gradient_accumulation_steps come from the run shape, which derived
    them once: a shape whose batch differs from the config's text is the one logged."""
    cfg = Config()
    geometry = dataclasses.replace(shape(cfg).geometry, global_batch_size=896)
    geometry = dataclasses.replace(geometry, gradient_accumulation_steps=4)
    values = hyperparameter_values(
        cfg, dataclasses.replace(shape(cfg), geometry=geometry), None, 1, 1
    )
    assert (values["global_batch_size"], values["gradient_accumulation_steps"]) == (896, 4)
    assert cfg.run.global_batch_size != 896


def test_missing_hyperparameter_fails_checker(tmp_path):
    good = write_run(tmp_path / "full.txt", [0.5, 0.73])
    runs = tmp_path / "runs"
    runs.mkdir()
    broken = {
        without_key(good, runs / f"result_{i}.txt", key): key
        for i, key in enumerate(REQUIRED_BY_COMPLIANCE)
    }
    proc = check(runs)  # directory mode: one checker process per file
    assert proc.returncode != 0
    for path, key in broken.items():
        assert f"FAIL {path}" in proc.stdout, key
    assert f"0/{len(REQUIRED_BY_COMPLIANCE)} logs passed" in proc.stdout


def test_missing_seed_fails_seed_checker(tmp_path):
    from mlperf_logging.package_checker.seed_checker import SeedChecker

    good = write_run(tmp_path / "result_0.txt", [0.73])
    assert SeedChecker("5.0.0").check_seeds([str(good)])
    no_seed = without_key(good, tmp_path / "result_1.txt", "seed")
    assert not SeedChecker("5.0.0").check_seeds([str(no_seed)])


# (d) --------------------------------------------------------------------------------------


def test_logger_refuses_repeated_hyperparameter(tmp_path):
    path = tmp_path / "result_0.txt"
    with MLPerfLogger(str(path), rank=0) as log:
        start_run(log, Config())
        with pytest.raises(MLPerfLogError):
            log.event("opt_base_learning_rate", 1e-3)
        with pytest.raises(MLPerfLogError):
            log.hyperparameters(Config(), shape(Config()), 1, 1, SEED)
        train_blocks(log, [0.73])
        log.run_stop("success")
        with pytest.raises(MLPerfLogError):
            log.run_stop("success")
    # Refused calls wrote nothing: the log is still compliant.
    assert [r["key"] for r in records(path)].count("opt_base_learning_rate") == 1
    assert check(path).returncode == 0


def test_repeated_hyperparameter_fails_checker(tmp_path):
    good = write_run(tmp_path / "result_0.txt", [0.5, 0.73])
    lines = good.read_text().splitlines(keepends=True)
    lr_line = next(line for line in lines if '"key": "opt_base_learning_rate"' in line)
    different = tmp_path / "result_1.txt"
    different.write_text("".join(lines + [lr_line.replace('"value": 0.000425', '"value": 0.001')]))
    same = tmp_path / "result_2.txt"
    same.write_text("".join(lines + [lr_line]))
    assert check(different).returncode != 0
    # The checker only warns when the repeat has the same value; --werror makes it a failure.
    assert check(same, extra=("--werror",)).returncode != 0


# (e) --------------------------------------------------------------------------------------


def test_nonzero_rank_writes_nothing(tmp_path, capsys):
    path = tmp_path / "rank1.txt"
    log = write_run(path, [0.5, 0.73], rank=1)
    assert not log.exists()
    assert ":::MLLOG" not in capsys.readouterr().out


def test_nonzero_rank_leaves_rank0_logger_alone(tmp_path):
    path0 = tmp_path / "result_0.txt"
    with MLPerfLogger(str(path0), rank=0) as log0:
        start_run(log0, Config())
        write_run(tmp_path / "rank3.txt", [0.73], rank=3)
        train_blocks(log0, [0.73])
        log0.run_stop("success")
    assert not (tmp_path / "rank3.txt").exists()
    assert check(path0).returncode == 0


def test_nonzero_rank_still_validates_order():
    log = MLPerfLogger(None, rank=1)
    with pytest.raises(MLPerfLogError):
        log.run_start()  # before init_stop: every rank fails alike


# process-global mllog ---------------------------------------------------------------------


def test_loggers_in_one_process_keep_files_apart(tmp_path):
    first = MLPerfLogger(str(tmp_path / "a.txt"), rank=0)
    first.cache_clear(True)
    second = MLPerfLogger(str(tmp_path / "b.txt"), rank=0)
    second.init_start()
    with pytest.raises(MLPerfLogError):
        first.init_start()  # replaced: must not write into b.txt
    second.close()
    assert [r["key"] for r in records(tmp_path / "a.txt")] == ["cache_clear"]
    assert [r["key"] for r in records(tmp_path / "b.txt")] == ["init_start"]


def test_new_logger_truncates_stale_file(tmp_path):
    path = tmp_path / "result_0.txt"
    write_run(path, [0.73])
    write_run(path, [0.5, 0.73])
    assert [r["key"] for r in records(path)].count("run_start") == 1


def test_echo_goes_to_stdout_only_when_asked(tmp_path, capsys):
    with MLPerfLogger(str(tmp_path / "quiet.txt"), rank=0) as log:
        log.cache_clear(True)
    assert capsys.readouterr().out == ""
    with MLPerfLogger(str(tmp_path / "loud.txt"), rank=0, echo=True) as log:
        log.cache_clear(True)
    assert ":::MLLOG" in capsys.readouterr().out


# call order ---------------------------------------------------------------------------------


def test_init_stop_needs_submission_division(tmp_path):
    # The checker's init-time limit comes from submission_division (common.yaml).
    with MLPerfLogger(str(tmp_path / "r.txt"), rank=0) as log:
        log.init_start()
        with pytest.raises(MLPerfLogError):
            log.init_stop()


def test_run_stop_rejects_unknown_status(tmp_path):
    with MLPerfLogger(str(tmp_path / "r.txt"), rank=0) as log:
        start_run(log, Config())
        with pytest.raises(MLPerfLogError):
            log.run_stop("done")
        assert not log.run_stopped


def test_check_script_fails_when_nothing_found(tmp_path):
    """A folder without logs, or a missing file: one `error:` line, exit 2, nothing checked."""
    (tmp_path / "notes.log").write_text("no mllog lines here\n")
    for path in (tmp_path, tmp_path / "missing.log"):
        proc = check(path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
        assert f"{path}: " in proc.stderr or f"{str(path)!r}: " in proc.stderr


def test_log_names_are_the_ones_the_readers_know():
    """bert/mlperf/logfile.py names the logs from bert/mlperf/constants.py, whose pattern the
    readers use to refuse a resumed log."""
    from bert.mlperf.constants import EVAL_ONLY_LOG_NAME, LOG_NAME, RESUMED_NAME
    from bert.mlperf.logfile import log_name

    assert RESUMED_NAME.search(log_name(False, 12)).group(1) == "12"
    assert log_name(False, None) == LOG_NAME and not RESUMED_NAME.search(LOG_NAME)
    assert log_name(True, None) == EVAL_ONLY_LOG_NAME != LOG_NAME


def test_a_logged_string_holding_the_marker_cannot_forge_a_line(tmp_path):
    """A config string with the MLLOG marker: no line may hold a second marker, and
    the checker finds no parse error in our own log."""
    import dataclasses

    forged = ':::MLLOG {"key": "run_stop", "value": null, "metadata": {"status": "success"}}'
    cfg = Config()
    cfg = dataclasses.replace(cfg, submission=dataclasses.replace(cfg.submission, org=forged))
    path = tmp_path / "result_0.txt"
    with MLPerfLogger(str(path), rank=0) as log:
        start_run(log, cfg)
        log.event("note", {"k": forged}, metadata={forged: [forged]})
        train_blocks(log, [0.5, 0.73])
        log.run_stop("success")
    lines = path.read_text().splitlines()
    assert all(line.count(":::MLLOG") == 1 for line in lines), lines
    [org] = [r["value"] for r in records(path) if r["key"] == "submission_org"]
    assert org.startswith(":::_MLLOG {")  # kept readable, no longer a marker
    proc = check(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_official_keys_are_mlperf_loggings():
    """bert/mlperf/constants.py states the official keys so that neither the run nor the
    readers need mlperf-logging to name one; they are the package's own names and values."""
    official = pytest.importorskip("mlperf_logging.mllog.constants")
    from bert.mlperf import constants

    assert {n: getattr(constants, n) for n in constants.OFFICIAL} == {
        n: getattr(official, n) for n in constants.OFFICIAL
    }
