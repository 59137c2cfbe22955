"""What the fuzz suites share (tests/integration/test_fuzz_*.py): the hypothesis profiles, every
console command run in this process, the bad-input promise, and generated bad values and files.

Profiles, chosen by the HYPOTHESIS_PROFILE environment variable:
- `default`: derandomized (the same examples every run) and sized so that the whole fuzz suite
  takes about a minute on 2 cores;
- `nightly`: fresh random examples, NIGHTLY_FACTOR times as many (`examples(n)`):

    HYPOTHESIS_PROFILE=nightly python -m pytest tests/integration/test_fuzz_*.py

The promise (README "Reliability"): a bad option or file ends with exit status 2 and exactly
one `error:` line on stderr, no traceback, and nothing of the user's changed (`Watched`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import math
import os
import re
import stat
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY_FACTOR = 40
PROFILE = "nightly" if os.environ.get("HYPOTHESIS_PROFILE") == "nightly" else "default"
settings.register_profile(
    "default",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.register_profile(
    "nightly", database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(PROFILE)


def examples(default: int) -> int:
    """Examples per test: `default` here, NIGHTLY_FACTOR times more in the nightly profile."""
    return default * (NIGHTLY_FACTOR if PROFILE == "nightly" else 1)


# -- the console commands, in this process ------------------------------------------------------

PYPROJECT = (ROOT / "pyproject.toml").read_text()
SCRIPTS = dict(
    re.findall(r'^(open-bert-[a-z]+) = "([^"]+)"', PYPROJECT.split("[project.scripts]")[1], re.M)
)
# each console script's main(argv) (train's `command` is main plus sys.exit)
MAINS = {name: target.split(":")[0] for name, target in SCRIPTS.items()}
ERROR_LINE = re.compile(r"(^|: )error: ")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def shown(self) -> str:
        return f"status {self.code}\nstdout:\n{self.out[-1500:]}\nstderr:\n{self.err[-3000:]}"


def run(command: str, argv: list[str], cwd: Path) -> Result:
    """`command ARGV` as its console script runs it, in this process, from the folder `cwd` (a
    command that wrongly takes a bad value writes nothing into the checkout); an exception that
    escapes is printed as the interpreter would (a traceback) with status 1."""
    main = importlib.import_module(MAINS[command]).main
    out, err = io.StringIO(), io.StringIO()
    with working_folder(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if isinstance(stop.code, str):
                print(stop.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - what a user would see
            traceback.print_exc()
            code = 1
    return Result(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def working_folder(folder: Path):
    """contextlib.chdir, which needs Python 3.11."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def assert_refused(result: Result) -> None:
    """Exit status 2, one stderr line and it is the `error:` line, no traceback."""
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code == 2, result.shown()
    assert "Traceback" not in result.err + result.out, result.shown()
    assert len(lines) == 1 and ERROR_LINE.search(lines[0]), result.shown()


class Watched:
    """Every entry under `folders`, by kind and (for a regular file) size, mtime and digest;
    a FIFO or a device is recorded by its stat alone (opening it would block or never end)."""

    def __init__(self, *folders: Path) -> None:
        self.folders = folders
        self.before = self.take()

    def take(self) -> dict[str, tuple]:
        seen = {}
        for folder in self.folders:
            for path in sorted(Path(folder).rglob("*")):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode):  # a sparse oversized input: its stat only
                    big = info.st_size > 1 << 20
                    digest = "" if big else hashlib.sha256(path.read_bytes()).hexdigest()
                    seen[str(path)] = ("file", info.st_size, info.st_mtime_ns, digest)
                elif stat.S_ISLNK(info.st_mode):
                    seen[str(path)] = ("link", os.readlink(path))
                else:
                    seen[str(path)] = (stat.S_IFMT(info.st_mode), info.st_mtime_ns)
        return seen

    def changed(self) -> list[str]:
        after = self.take()
        return sorted(
            p for p in self.before.keys() | after.keys() if self.before.get(p) != after.get(p)
        )


# -- bad values, class by class -----------------------------------------------------------------


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


NON_NUMBERS = st.one_of(
    st.sampled_from(["", " ", "eight", "1,000", "0x10", "1e", "--", "1 2", "½", "true", "[1]"]),
    st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s and not _number(s)),
)
HUGE_INTS = st.one_of(
    st.sampled_from(["1e999999999", "9" * 5000, "-" + "9" * 40, "1" + "0" * 31]),
    st.integers(31, 10**9).map(lambda e: f"1e{e}"),
    st.integers(65, 400).map(lambda n: "7" * n),
)
HUGE_FLOATS = st.one_of(
    st.sampled_from(["1e400", "9" * 5000, "1e999999999", "-1e309"]),
    st.integers(309, 10**9).map(lambda e: f"{1 + e % 9}e{e}"),  # beyond the largest double
)
NAN_INF = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "+inf", "-nan"])
NUL = st.text(max_size=6).map(lambda s: f"{s}\x00{s}")


def below(spec: "Numeric") -> st.SearchStrategy[str]:
    """Values under `spec.low` (negatives, for an option that must be >= 0 or > 0), or at it
    where it is excluded."""
    low = spec.low
    if spec.kind is int:
        top = math.ceil(low) - 1 if spec.inclusive or low != int(low) else int(low)
        return st.integers(min(top, -(10**6)), top).map(str)
    floats = st.floats(low - 1e6, low, exclude_max=spec.inclusive, allow_nan=False)
    # -0.0 is 0.0 to every comparison: at an inclusive 0 it is allowed
    return floats.filter(lambda x: x < low or not spec.inclusive).map(repr)


def above(spec: "Numeric") -> st.SearchStrategy[str]:
    """Values over `spec.high` that are still ordinary numbers."""
    high = spec.high
    if spec.kind is int:
        return st.integers(int(high) + 1, int(high) * 3 + 10).map(str)
    return st.floats(high, high * 4 + 10, exclude_min=True, allow_infinity=False).map(repr)


@dataclass(frozen=True)
class Numeric:
    """A number option: its kind and the bounds every value must keep (None: none)."""

    option: str  # "--nodes", or "--set run.max_steps" for a config key
    kind: type  # int or float
    low: float | None = None
    inclusive: bool = True  # `low` itself is allowed
    high: float | None = None

    def argv(self, value: str) -> list[str]:
        if self.option.startswith("--set "):
            return ["--set", f"{self.option.split(' ', 1)[1]}={value}"]
        return [f"{self.option}={value}"]  # `=`: a value starting with '-' stays a value


def bad_numbers(spec: Numeric) -> st.SearchStrategy[tuple[str, str]]:
    """(class, value) pairs that `spec`'s option must refuse."""
    classes = [
        st.tuples(st.just("non-number"), NON_NUMBERS),
        st.tuples(st.just("huge"), HUGE_INTS if spec.kind is int else HUGE_FLOATS),
        st.tuples(st.just("nan/inf"), NAN_INF),
        st.tuples(st.just("NUL"), NUL),
    ]
    if spec.low is not None:
        classes.append(st.tuples(st.just("negative"), below(spec)))
    if spec.high is not None:
        classes.append(st.tuples(st.just("above maximum"), above(spec)))
    if spec.kind is int:
        classes.append(st.tuples(st.just("fraction"), st.sampled_from(["2.5", "0.5", "1e-3"])))
    return st.one_of(classes)


# -- bad files, class by class ------------------------------------------------------------------

# what an input file may be instead: the classes of the issue, and garbage bytes
INPUT_CLASSES = [
    "folder",
    "fifo",
    "device",
    "symlink_loop",
    "dangling_symlink",
    "symlink_to_fifo",
    "oversized",
    "duplicate_keys",
    "garbage",
]
# what a path a command writes may be instead (a folder it creates, or a file)
OUTPUT_CLASSES = [
    "regular_file",  # where a folder goes
    "folder",  # where a file goes
    "fifo",
    "device",
    "symlink_loop",
    "dangling_symlink",
    "symlink_to_user_file",
    "under_a_file",
]


def make_bad(kind: str, path: Path, cap: int = 0, content: bytes = b"") -> str:
    """A bad path of class `kind` at `path` (its parent exists); returns the path to pass.
    `cap`: the reader's size limit (an oversized file is a sparse one past it, so it costs no
    disk); `content`: the file's bytes (a key given twice, garbage)."""
    if kind in ("duplicate_keys", "garbage"):
        path.write_bytes(content)
    elif kind == "regular_file":
        path.write_text("a user's file\n")
    elif kind == "symlink_to_user_file":
        user = path.with_name("users_file.txt")
        user.write_text("a user's file: never written through\n")
        os.symlink(user, path)
    elif kind == "under_a_file":
        path.write_text("a user's file\n")
        return str(path / "inside")
    elif kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("a folder where a file is expected\n")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        return "/dev/zero"
    elif kind == "symlink_loop":
        other = path.with_name(path.name + ".loop")
        os.symlink(other, path)
        os.symlink(path, other)
    elif kind == "dangling_symlink":
        os.symlink(path.with_name("nowhere"), path)
    elif kind == "symlink_to_fifo":
        fifo = path.with_name(path.name + ".fifo")
        os.mkfifo(fifo)
        os.symlink(fifo, path)
    elif kind == "oversized":
        with open(path, "wb") as f:
            f.truncate(cap + 1)
    else:
        raise ValueError(kind)
    return str(path)


def duplicate_keys(fmt: str, key: str, first, second) -> str:
    """A document of format `fmt` (yaml, json, mllog, jsonl) whose object gives `key` twice."""
    import json

    k, a, b = json.dumps(key), json.dumps(first), json.dumps(second)
    if fmt == "yaml":
        return f"run:\n  {k}: {a}\n  {k}: {b}\n"
    if fmt == "json":
        return f'{{"hidden_size": 32, {k}: {a}, {k}: {b}}}\n'
    if fmt == "jsonl":
        return f'{{"kind": "train", "samples": 8, {k}: {a}, {k}: {b}}}\n'
    # an MLPerf log: a well-formed run_start, then a run_stop whose metadata says two things
    head = (
        '{"namespace": "", "time_ms": 1, "event_type": "INTERVAL_START", "key": "run_start", '
        '"value": null, "metadata": {}}'
    )
    stop = (
        '{"namespace": "", "time_ms": 2, "event_type": "INTERVAL_END", "key": "run_stop", '
        f'"value": null, "metadata": {{"status": "success", {k}: {a}, {k}: {b}}}}}'
    )
    return f":::MLLOG {head}\n:::MLLOG {stop}\n"


DUPLICATE_PARTS = st.tuples(
    st.one_of(
        st.sampled_from(["status", "key", "samples", "max_steps"]), st.text(min_size=1, max_size=8)
    ),
    st.one_of(st.integers(-5, 5), st.text(max_size=4), st.booleans()),
    st.one_of(st.integers(-5, 5), st.text(max_size=4), st.none()),
)
