"""Every console command's number and text options, fuzzed: generated values
of each class an option must refuse (non-numbers, huge numbers, NaN and infinities, values below
the minimum or above the maximum, fractions for counts, a NUL anywhere) end with exit status 2,
exactly one `error:` line that names the option, no traceback, and nothing of the user's
changed. The base command line around the bad option is a valid one, so the option is what is
refused (and a value wrongly taken shows up as a run that goes on).

open-bert-train's options are its config keys (`--set KEY=VALUE`, every int and float key with
the bounds the config declares, under --print-config); the others' are their flags. Runs in
this process (tests/fuzz_support.py): the default profile keeps the file to seconds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import annotated_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_support import Numeric, Watched, assert_refused, bad_numbers, examples, run
from bert.config import Config
from bert.submission.package import MAX_NODES, MAX_PER_NODE
from data.download.fetch import MAX_RETRIES, MAX_WAIT_S


def config_numbers(cls: type = Config, prefix: str = "") -> list[Numeric]:
    """Every int and float config key, with the bounds its field declares."""
    found = []
    for name, info in cls.__pydantic_fields__.items():
        if dataclasses.is_dataclass(info.annotation):
            found += config_numbers(info.annotation, f"{prefix}{name}.")
        elif info.annotation in (int, float):
            bounds: dict = {}
            for rule in info.metadata:
                if isinstance(rule, annotated_types.Gt):
                    bounds.update(low=rule.gt, inclusive=False)
                elif isinstance(rule, annotated_types.Ge):
                    bounds.update(low=rule.ge, inclusive=True)
                elif isinstance(rule, (annotated_types.Le, annotated_types.Lt)):
                    bounds["high"] = getattr(rule, "le", None) or getattr(rule, "lt")
            found.append(Numeric(f"--set {prefix}{name}", info.annotation, **bounds))
    return found


def _prepare() -> list[tuple[list[str], Numeric]]:
    """(valid command line, option) of open-bert-prepare's subcommands."""
    text, vocab, out = "{w}/text.txt", "{w}/vocab.txt", "{w}/out/p"
    examples_ = ["examples", text, "--vocab", vocab, "--out", out]
    counts = {
        "vocab": (["vocab", text, "--out", out], ["--max-seq-length", "--max-predictions"]),
        "examples": (examples_, ["--dupe-factor", "--workers", "--max-predictions"]),
        "reshard": (
            ["reshard", "{w}/a.hdf5", "--out", out, "--num-shards=2"],
            ["--num-shards", "--shards-per-bucket"],
        ),
        "pick-eval": (["pick-eval", "{w}/a.hdf5", "--out", out], ["--count"]),
        "check-distinct": (["check-distinct", "{w}/a.hdf5"], ["--first-k"]),
    }
    rows = [(base, Numeric(opt, int, 1)) for base, opts in counts.values() for opt in opts]
    rows += [
        (examples_, Numeric("--seed", int)),
        (["vocab", text, "--out", out], Numeric("--size", int, 1)),
    ]
    rows += [
        (examples_, Numeric(o, float, 0.0, True, 1.0))
        for o in ("--masked-lm-prob", "--short-seq-prob")
    ]
    return rows


def _plan() -> list[tuple[list[str], Numeric]]:
    base = ["--gpus=8", "--gpu=h100"]
    custom = ["--gpus=8", "--gpu=mygpu", "--memory-gib=80", "--tflops=300", "--efficiency=0.3"]
    ints = [
        Numeric(o, int, 1) for o in ("--gpus", "--gpus-per-node", "--batch", "--max-micro-batch")
    ]
    positive = [Numeric(o, float, 0.0, False) for o in ("--efficiency",)]
    custom_floats = [
        Numeric(o, float, 0.0, False) for o in ("--memory-gib", "--tflops", "--link-gbps")
    ]
    rows = [(base, spec) for spec in ints + positive]
    rows += [(custom, spec) for spec in custom_floats]
    return rows + [(base, Numeric("--init-minutes", float, 0.0, True))]


# command -> [(valid command line, option)]; {w} is the test's folder
OPTIONS = {
    "open-bert-train": [
        (["--print-config", "--set", "run.output_dir={w}/out/run"], spec)
        for spec in config_numbers()
    ],
    "open-bert-prepare": _prepare(),
    "open-bert-download": [
        (["{w}/out/dl", "--metadata", "http://127.0.0.1:9/bert/bert.uri", "--retries=0"], spec)
        for spec in (
            Numeric("--retries", int, 0, True, MAX_RETRIES),
            Numeric("--retry-wait", float, 0.0, True, MAX_WAIT_S),
            Numeric("--timeout", float, 0.0, False, MAX_WAIT_S),
        )
    ],
    "open-bert-plan": _plan(),
    "open-bert-package": [
        (["{w}/nolog.txt", "--system", "s", "--out", "{w}/out/pkg", "--skip-checks"], spec)
        for spec in (
            Numeric("--nodes", int, 1, True, MAX_NODES),
            Numeric("--accelerators-per-node", int, 0, True, MAX_PER_NODE),
        )
    ],
}
# text options: (command line, option, values it must refuse, words the error holds)
TEXT_OPTIONS = {
    "open-bert-check": [
        (
            ["{w}/text.txt"],
            "--ruleset",
            st.sampled_from(["9.9.9", "5.0", "../x", "", "5.0.0/.."]),
            "--ruleset",
        ),
        (
            ["{w}/text.txt"],
            "--usage",
            st.sampled_from(["hpc", "nope", "../training", "TRAINING"]),
            "--usage",
        ),
    ],
    "open-bert-package": [
        (
            ["{w}/text.txt", "--out", "{w}/out/pkg", "--skip-checks"],
            "--system",
            st.sampled_from(["..", "a/b", "/abs", ""]),
            "--system",
        ),
        (
            ["{w}/text.txt", "--system", "s", "--out", "{w}/out/pkg"],
            "--division",
            st.sampled_from(["shut", "Closed", ""]),
            "--division",
        ),
    ],
    "open-bert-plan": [
        (
            ["--gpus=8", "--gpu=h100"],
            "--calibrate",
            st.sampled_from(["8", "x:1", "0:5", "8:-1", "8:nan", "8:1:2:3", "8:inf"]),
            "--calibrate",
        ),
        (["--gpus=8"], "--gpu", st.sampled_from(["nope-gpu", ""]), "--gpu"),
    ],
    "open-bert-download": [
        (
            ["{w}/out/dl", "--retries=0"],
            "--metadata",
            st.sampled_from(["not a url", "ftp://x/y.uri", "http://", "file:///etc/passwd"]),
            "metadata URL",
        ),
    ],
    "open-bert-convert": [
        (["nvidia", "{w}/text.txt"], "--out", st.just("{w}/text.txt"), "--out"),  # an input
    ],
    "open-bert-plot": [
        (["{w}/text.txt"], "--out", st.sampled_from(["{w}", "{w}/text.txt/p.png"]), "--out"),
    ],
}
COMMANDS = sorted(set(OPTIONS) | set(TEXT_OPTIONS))


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz_options")
    (folder / "text.txt").write_text("one sentence here.\nanother one.\n\nnext document.\n")
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\none\n")
    (folder / "a.hdf5").write_bytes(b"")
    (folder / "out").mkdir()
    return folder


def check(world: Path, command: str, argv: list[str], names: str) -> None:
    argv = [a.replace("{w}", str(world)) for a in argv]
    watched = Watched(world)
    result = run(command, argv, world)
    assert_refused(result)
    assert names in result.err, result.shown()
    assert watched.changed() == []


@pytest.mark.parametrize("command", sorted(OPTIONS))
@settings(max_examples=examples(40))
@given(data=st.data())
def test_bad_numbers_are_refused(world, command, data):
    base, spec = data.draw(st.sampled_from(OPTIONS[command]), label="option")
    kind, value = data.draw(bad_numbers(spec), label="value")
    name = spec.option.split(" ")[-1]
    check(world, command, [*base, *spec.argv(value)], name if kind != "NUL" else "NUL")


@pytest.mark.parametrize("command", COMMANDS)
@settings(max_examples=examples(10))
@given(data=st.data())
def test_bad_text_and_nul_are_refused(world, command, data):
    rows = TEXT_OPTIONS.get(command, [])
    if rows and data.draw(st.booleans(), label="text, not NUL"):
        base, option, values, names = data.draw(st.sampled_from(rows), label="option")
        argv = [*base, f"{option}={data.draw(values, label='value')}"]
    else:  # a NUL in any argument of any command, where a path or a name goes
        base = next(iter(OPTIONS.get(command) or [(rows[0][0], None)]))[0]
        at = data.draw(st.integers(0, len(base) - 1), label="at")
        argv = [*base[:at], base[at] + "\x00" + data.draw(st.text(max_size=4)), *base[at + 1 :]]
        names = "NUL"
    check(world, command, argv, names)
