"""Your own text to a trained tiny model, by the commands `open-bert-prepare --help` shows.

The commands are read from the help text itself (data/prepare/arguments.py INPUT_FORMAT) and
the README's copy of them, so the documented path is the tested one: make a vocabulary, prepare
with --config tiny_cpu, train a few steps on the result. Also the promises around it: --config
sets the sizes, a flag beats it, a vocabulary larger than the model's is refused before any
work, and a too-small eval text names the key to change.
"""

from __future__ import annotations

import json
import math
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from data.prepare.arguments import INPUT_FORMAT

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "open-bert-prepare": [sys.executable, str(ROOT / "scripts" / "prepare_data.py")],
    "open-bert-train": [sys.executable, str(ROOT / "run_pretraining.py")],
}
# the documented run is the default's 800 steps; a few show that it trains
FEW_STEPS = [
    "--set=schedule.total_steps=12",
    "--set=schedule.warmup_steps=2",
    "--set=eval.interval_samples=192",
    "--set=log.interval_s=0",
]
WORDS = (
    "the river ran past old stone houses where children played and farmers sold bread "
    "while rain fell over green hills and quiet roads led north to a small town with "
    "a market church bridge school library and harbor full of boats"
).split()


def documented_commands(text: str) -> list[list[str]]:
    """The `open-bert-*` command lines of `text`, continuation lines joined, split as a
    shell would."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        shlex.split(line.strip())
        for line in joined.splitlines()
        if line.strip().startswith("open-bert-")
    ]


def write_text(path: Path, seed: int, documents: int) -> Path:
    """`documents` paragraphs of a few sentences each, one sentence per line, blank lines
    between them: the input format the help text states."""
    rng = random.Random(seed)
    paragraphs = [
        "\n".join(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
            for _ in range(rng.randint(3, 7))
        )
        for _ in range(documents)
    ]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    program, *args = argv
    return subprocess.run(
        [*COMMANDS[program], *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("own_text")
    write_text(folder / "train.txt", 1, 80)
    write_text(folder / "eval.txt", 2, 30)
    return folder


def test_readme_shows_the_help_texts_commands():
    readme = (ROOT / "README.md").read_text()
    for argv in documented_commands(INPUT_FORMAT):
        assert " ".join(argv) in " ".join(" ".join(a) for a in documented_commands(readme)), (
            f"README lacks: {shlex.join(argv)}"
        )


@pytest.mark.slow
def test_documented_path_trains_the_tiny_model(texts):
    """vocab -> all --config tiny_cpu -> open-bert-train: finite losses, and the exit status
    of a run whose step budget ran out before the target (1) or that reached it (0)."""
    vocab_cmd, prepare_cmd, train_cmd = documented_commands(INPUT_FORMAT)
    for argv in (vocab_cmd, prepare_cmd):
        done = run(argv, texts)
        assert done.returncode == 0, done.stderr
    with h5py.File(texts / "prepared" / "eval" / "eval_200.hdf5") as f:
        assert max(len(ids) for ids in f["input_ids"]) <= 128  # tiny_cpu's data.max_seq_length
    trained = run([*train_cmd, *FEW_STEPS, "--set=run.output_dir=run"], texts)
    assert trained.returncode in (0, 1), trained.stderr
    losses = [
        json.loads(line)["loss"]
        for line in (texts / "run" / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in line
    ]
    assert losses and all(math.isfinite(x) for x in losses)
    assert "eval at" in trained.stderr + trained.stdout


def test_config_sets_the_sizes_and_a_flag_beats_it(texts, tmp_path):
    from bert.prepare import main

    args = ["examples", "--config", "tiny_cpu", "--vocab", str(tmp_path / "v.txt")]
    assert main(["vocab", str(texts / "train.txt"), "--out", str(tmp_path / "v.txt")]) == 0
    assert len((tmp_path / "v.txt").read_text().splitlines()) <= 1024
    assert (
        main(
            [*args, "--max-predictions", "7", str(texts / "eval.txt"), "--out", str(tmp_path / "x")]
        )
        == 0
    )
    with h5py.File(tmp_path / "x" / "eval.hdf5") as f:  # fixed-length rows: the sizes themselves
        assert f["input_ids"].shape[1] == 128 and f["masked_lm_positions"].shape[1] == 7


def test_vocab_larger_than_the_model_is_refused(texts, tmp_path, capsys):
    from bert.prepare import main

    big = tmp_path / "big.txt"
    big.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(map(str, range(2000))))
    )
    argv = ["examples", "--config", "tiny_cpu", "--vocab", str(big), str(texts / "eval.txt")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.vocab_size=1024" in err
    assert not (tmp_path / "out").exists()


def test_too_few_eval_samples_names_the_key(texts, tmp_path, capsys):
    from bert.prepare import main

    vocab = tmp_path / "v.txt"
    assert main(["vocab", str(texts / "train.txt"), "--out", str(vocab)]) == 0
    argv = ["all", "--config", "tiny_cpu", "--quiet", "--num-shards", "1", "--vocab", str(vocab)]
    text = ["--train-text", str(texts / "eval.txt"), "--eval-text", str(texts / "eval.txt")]
    assert main([*argv, *text, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "cannot pick 2000 eval samples" in err and "eval.samples of config tiny_cpu" in err
