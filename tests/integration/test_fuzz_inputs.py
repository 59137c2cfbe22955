"""Property-based fuzzing of everything a user hands the program.

Random and boundary values for every config key (types, NaN, inf, negatives, zero, huge,
strings), and random corruptions of each kind of file the program reads (a config, a
bert_config.json, each file of a training checkpoint, a data shard). The invariant, for each:

- the loader (`load_config`) returns a config or raises the one bad-input error whose message
  is a single short line, never anything else;
- run_pretraining.main exits 0 or 1 without a traceback (a published mlperf.log is strict JSON
  and ends with run_stop; a failed run prints at most one `error:` line), or exits 2 with
  exactly one `error:` line; and no file outside the run's new output folder changes.

Budget: the default profile keeps this file within about a minute on a loaded 2-core machine
(examples per test below, `derandomize`: the same examples every run). The nightly profile
runs NIGHTLY_FACTOR times as many, with fresh random examples (tests/fuzz_support.py):

    HYPOTHESIS_PROFILE=nightly python -m pytest tests/integration/test_fuzz_inputs.py
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bert.config import describe_fields, load_config
from bert.core.errors import BadInputError

from cli_rows import changed_paths, snapshot
from fuzz_support import examples, working_folder
from tiny_run import make_tiny_data
from bert.tools.common import set_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import run_pretraining  # noqa: E402

ERROR_LINE = re.compile(r"(^|: )error: ")
KEYS = [line.split(" ")[0] for line in describe_fields()]
SPECIAL_TEXT = [
    "",
    " ",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "-0",
    "0x10",
    "1_000",
    "1,2,3",
    "true",
    "None",
    "null",
    "~",
    "\x00",
    "é",
    "a" * 500,
    "[1, 2]",
    "{a: 1}",
]
BOUNDARY_INTS = [0, -1, 1, 2, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30]
BOUNDARY_FLOATS = [0.0, -0.0, -1.0, 1e-300, 1e300, 0.5, 1.0, math.nan, math.inf, -math.inf]

any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(BOUNDARY_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(BOUNDARY_FLOATS),
    st.text(max_size=20),
    st.sampled_from(SPECIAL_TEXT),
    st.lists(st.integers(-5, 600), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def as_tree(key: str, value) -> dict:
    *sections, leaf = key.split(".")
    tree = {leaf: value}
    for name in reversed(sections):
        tree = {name: tree}
    return tree


def assert_one_short_line(err: BadInputError) -> None:
    text = str(err)
    assert "\n" not in text and 0 < len(text) < 600, text[:2000]


# -- the loader: every key, every kind of value -------------------------------------------------


@settings(max_examples=examples(1000))
@given(key=st.sampled_from(KEYS), value=any_value, route=st.sampled_from(["yaml", "set"]))
@example(key="run.output_dir", value=None, route="yaml")
@example(key="submission", value=0, route="yaml")
@example(key="optim.lr", value="inf", route="set")
@example(key="run.seed", value=2**64, route="yaml")
def test_every_config_value_is_taken_or_refused_in_one_line(tmp_path_factory, key, value, route):
    try:
        if route == "yaml":
            path = tmp_path_factory.getbasetemp() / f"fuzz_{uuid.uuid4().hex}.yaml"
            path.write_text(yaml.safe_dump(as_tree(key, value)))
            load_config(path)
        else:
            load_config(None, [f"{key}={value}"])
    except BadInputError as err:
        assert_one_short_line(err)


@settings(max_examples=examples(40))
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
@example(data=b"run: &a [*a]\n")
@example(data=b"a: &a [1, 1]\nb: &b [*a, *a]\nrun: {seed: *b}\n")
@example(data="run:\n  seed: 1\n".encode("utf-16"))
def test_every_config_file_is_read_or_refused_in_one_line(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / f"fuzz_{uuid.uuid4().hex}.yaml"
    path.write_bytes(data)
    try:
        load_config(path)
    except BadInputError as err:
        assert_one_short_line(err)


# -- whole runs: values that reach the training loop --------------------------------------------

TINY = {
    "model.vocab_size": 256,
    "model.hidden_size": 32,
    "model.num_hidden_layers": 1,
    "model.num_attention_heads": 2,
    "model.intermediate_size": 64,
    "model.max_position_embeddings": 64,
    "data.max_seq_length": 64,
    "data.max_predictions_per_seq": 10,
    "data.synthetic.enabled": "false",
    "run.global_batch_size": 8,
    "run.max_steps": 3,
    "eval.interval_samples": 16,
    "eval.samples": 16,
    "run.device": "cpu",
    "run.threads": 1,
    "run.seed": 7,
    "schedule.total_steps": 20,
    "schedule.warmup_steps": 2,
    "log.interval_s": 1000,
    "submission.division": "open",
    "run.max_nonfinite_steps": 2,
}
FLOAT_VALUES = st.one_of(
    st.sampled_from(BOUNDARY_FLOATS),
    st.floats(-1e6, 1e6),
    st.floats(allow_nan=True, allow_infinity=True),
)
SMALL_INTS = st.one_of(st.integers(-2, 40), st.sampled_from(BOUNDARY_INTS))
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(SPECIAL_TEXT))
RUN_KEYS = {  # keys that reach the loop; sizes stay small enough for a seconds-long run
    **dict.fromkeys(
        [
            "optim.lr",
            "optim.eps",
            "optim.beta1",
            "optim.beta2",
            "optim.weight_decay",
            "optim.max_grad_norm",
            "schedule.power",
            "model.hidden_dropout_prob",
            "model.attention_probs_dropout_prob",
            "model.initializer_range",
            "model.layer_norm_eps",
            "eval.target_mlm_accuracy",
            "log.interval_s",
        ],
        FLOAT_VALUES,
    ),
    **dict.fromkeys(
        [
            "run.seed",
            "run.threads",
            "model.num_attention_heads",
            "schedule.warmup_steps",
            "schedule.start_warmup_step",
            "eval.batch_size",
            "eval.samples",
            "checkpoint.interval_steps",
            "checkpoint.keep",
            "data.max_predictions_per_seq",
            "run.gradient_accumulation_steps",
            "model.type_vocab_size",
            "model.pad_vocab_to_multiple_of",
        ],
        SMALL_INTS,
    ),
    **dict.fromkeys(
        [
            "run.precision",
            "run.output_dir",
            "submission.org",
            "model.hidden_act",
            "optim.name",
            "data.balance",
            "model.attention",
        ],
        TEXT,
    ),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Data and an earlier run's folder (a real 2-step run with checkpoints), watched."""
    root = tmp_path_factory.mktemp("fuzz")
    data, earlier = root / "data", root / "earlier"
    make_tiny_data(data, samples_per_shard=32, eval_samples=16, seed=3)
    code, out, err = run_main(data, earlier, {"run.max_steps": 2, "checkpoint.interval_steps": 1})
    assert code == 0, out + err  # stopped at its step budget, as told
    return {
        "root": root,
        "data": data,
        "earlier": earlier,
        "ckpt": earlier / "checkpoints" / "step_00000002",
        "runs": root / "runs",
    }


def run_main(data: Path, out: Path, changed: dict, cli: tuple[str, ...] = ()) -> tuple:
    """run_pretraining.main in this process, in `out`'s parent as the working folder (a
    relative output folder lands there): (status, stdout, stderr); a traceback as status 1."""
    values = {
        **TINY,
        "data.train_dir": data,
        "data.eval_file": data / "eval.hdf5",
        "run.output_dir": out,
        **changed,
    }
    args = ["--quiet", *cli, *set_args(values)]
    stdout, stderr = io.StringIO(), io.StringIO()
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        working_folder(out.parent),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = run_pretraining.main(args)
        except BaseException as err:  # noqa: BLE001 - what the interpreter would print
            import traceback

            traceback.print_exception(err, file=sys.stderr)
            code = 1
    return code, stdout.getvalue(), stderr.getvalue()


def assert_run_invariant(code: int, out: str, err: str, outputs: list[Path]) -> None:
    shown = f"status {code}\nstdout:\n{out[-1500:]}\nstderr:\n{err[-3000:]}"
    assert "Traceback" not in err + out, shown
    errors = [line for line in err.splitlines() if ERROR_LINE.search(line)]
    assert code in (0, 1, 2), shown
    assert len(errors) == 1 if code == 2 else len(errors) <= 1, shown
    for folder in outputs:
        for log in folder.glob("mlperf*.log*") if folder.is_dir() else []:
            lines = [
                line.split(":::MLLOG ", 1)[1]
                for line in log.read_text().splitlines()
                if ":::MLLOG " in line
            ]
            events = [json.loads(line, parse_constant=_refuse) for line in lines]
            if log.name == "mlperf.log":
                assert events[-1]["key"] == "run_stop", log


def _refuse(name: str):
    raise AssertionError(f"non-JSON constant {name} in an MLPerf log")


@settings(max_examples=examples(80))
@given(key=st.sampled_from(sorted(RUN_KEYS)), data=st.data())
def test_a_run_with_any_value_exits_cleanly(world, key, data):
    value = data.draw(RUN_KEYS[key], label="value")
    out = world["runs"] / uuid.uuid4().hex / "out"
    before = snapshot([str(world["data"]), str(world["earlier"])])
    code, stdout, stderr = run_main(world["data"], out, {key: value})
    where = [out, out.parent / str(value)] if key == "run.output_dir" else [out]
    assert_run_invariant(code, stdout, stderr, where)
    assert changed_paths(before, snapshot([str(world["data"]), str(world["earlier"])])) == []


# -- corrupted files ----------------------------------------------------------------------------


def corrupt(data: bytes, how: str, position: float, noise: bytes) -> bytes:
    cut = int(len(data) * position)
    if how == "truncate":
        return data[:cut]
    if how == "flip":
        flipped = bytearray(data)
        for i, byte in enumerate(noise[:8]):
            flipped[(cut + i * 997) % max(len(data), 1)] ^= byte or 0xFF
        return bytes(flipped)
    return noise  # replaced outright


CHECKPOINT_FILES = ["manifest.json", "config.json", "trainer.pt", "rank_00000.pt"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=examples(60))
@given(
    name=st.sampled_from(CHECKPOINT_FILES),
    how=st.sampled_from(["truncate", "flip", "replace", "json"]),
    position=st.floats(0, 1),
    noise=st.binary(min_size=1, max_size=64),
    shape=json_values,
)
def test_a_corrupted_checkpoint_is_refused_in_one_line(world, name, how, position, noise, shape):
    folder = world["runs"] / uuid.uuid4().hex
    ckpt = Path(shutil.copytree(world["ckpt"], folder / "step_00000002"))
    target = ckpt / name
    target.write_bytes(
        json.dumps(shape).encode()
        if how == "json"
        else corrupt(target.read_bytes(), how, position, noise)
    )
    before = snapshot([str(world["data"]), str(world["earlier"])])
    code, out, err = run_main(
        world["data"], folder / "out", {"run.max_steps": 3}, cli=("--resume", str(ckpt))
    )
    assert_run_invariant(code, out, err, [folder / "out"])
    assert changed_paths(before, snapshot([str(world["data"]), str(world["earlier"])])) == []


@settings(max_examples=examples(60))
@given(
    kind=st.sampled_from(["bert_config", "shard", "eval"]),
    how=st.sampled_from(["truncate", "flip", "replace", "json"]),
    position=st.floats(0, 1),
    noise=st.binary(min_size=1, max_size=64),
    shape=json_values,
)
def test_a_corrupted_input_file_is_refused_in_one_line(world, kind, how, position, noise, shape):
    folder = world["runs"] / uuid.uuid4().hex
    data = Path(shutil.copytree(world["data"], folder / "data"))
    changed: dict = {}
    if kind == "bert_config":
        target = folder / "bert_config.json"
        target.write_text(json.dumps({"hidden_size": 32, "num_attention_heads": 2}))
        changed["model.bert_config_file"] = target
    else:
        target = data / "eval.hdf5" if kind == "eval" else sorted(data.glob("part_*"))[0]
    target.write_bytes(
        json.dumps(shape).encode()
        if how == "json"
        else corrupt(target.read_bytes(), how, position, noise)
    )
    before = snapshot([str(world["data"]), str(world["earlier"])])
    code, out, err = run_main(data, folder / "out", changed)
    assert_run_invariant(code, out, err, [folder / "out"])
    assert changed_paths(before, snapshot([str(world["data"]), str(world["earlier"])])) == []
