"""One input rule for every command: bert/core/inputs.py, used by every parser.

Each class of bad input a tester found, for each command it applies to: an integer with a huge
exponent or 5,000 digits (it hung, or escaped as Python's own ValueError), a YAML key given
twice, a YAML 1.1 octal or base-60 number, inf/NaN/negative planner and downloader numbers,
a config or manifest that is a device or a FIFO (read forever, or blocked past SIGTERM), a NUL
in a path argument; for open-bert-package, -check and -plot (which parsed with plain argparse)
also an output path that is a file, or lies under one, and rules the installed checker lacks.
The promise, as in test_bad_inputs.py: exit status 2, exactly one `error:`
line holding the row's fragments, no traceback, nothing of the user's touched, no hang.

The rows run in one interpreter (tests/cli_rows.py) with a timeout: a row that hangs fails
them all, which is what a hang is. The training rows add --print-config, so a row the program
wrongly accepts exits 0 at once instead of starting a run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bert.config import load_config
from bert.core.errors import BadInputError, ConfigError
from bert.core.inputs import MAX_INT_DIGITS, parse_float, parse_int, read_regular
from commands import assert_one_error

ROOT = Path(__file__).resolve().parents[2]
MAIN = "run_pretraining.py"
HUGE = "9" * 5000
NUL = "\x00"


@dataclass(frozen=True)
class Row:
    name: str
    args: list[str]  # {inputs} {rows} are filled in
    fragments: list[str]
    target: str = MAIN  # a script path (relative to the repo) or a module name
    must_not_exist: str = ""
    print_config: bool = True  # training rows: exit after reading the config, if accepted


def S(key: str, value: str) -> list[str]:
    return ["--set", f"{key}={value}"]


def _config_rows() -> list[Row]:
    """open-bert-train's config: the number rule on --set, the YAML rules, the file rule."""
    cfg = "{inputs}/"
    return [
        Row(
            "set_int_huge_exponent", S("run.max_steps", "1e999999999"), ["run.max_steps=", "digits"]
        ),
        Row("set_int_5000_digits", S("run.max_steps", HUGE), ["run.max_steps=", "at most"]),
        Row(
            "set_list_huge_exponent",
            S("data.curriculum.bucket_boundaries", "128,1e999999999"),
            ["data.curriculum.bucket_boundaries"],
        ),
        Row("set_float_huge_text", S("optim.lr", HUGE), ["optim.lr=", "at most"]),
        Row(
            "yaml_int_5000_digits", ["--config", cfg + "long_int.yaml"], ["run.max_steps", "digits"]
        ),
        Row(
            "yaml_duplicate_key",
            ["--config", cfg + "dup_key.yaml"],
            ["dup_key.yaml", "'run.max_steps' given twice", "lines 2 and 3"],
        ),
        Row(
            "yaml_repeated_section",
            ["--config", cfg + "dup_section.yaml"],
            ["dup_section.yaml", "'run' given twice", "lines 1 and 3"],
        ),
        Row(
            "yaml_octal_int",
            ["--config", cfg + "octal.yaml"],
            ["octal.yaml", "run.max_steps='010'", "line 2", "octal"],
        ),
        Row(
            "yaml_base60_int",
            ["--config", cfg + "base60.yaml"],
            ["base60.yaml", "run.max_steps='1:30'", "line 2", "base-60"],
        ),
        Row("config_is_dev_zero", ["--config", "/dev/zero"], ["/dev/zero", "a device"]),
        Row("config_is_a_fifo", ["--config", cfg + "fifo.yaml"], ["fifo.yaml", "a FIFO"]),
        Row("config_too_large", ["--config", cfg + "large.yaml"], ["large.yaml", "bytes"]),
        Row(
            "resume_manifest_is_a_fifo",
            ["--resume", "{inputs}/ckpt_fifo", *S("run.output_dir", "{rows}/fifo_run")],
            ["ckpt_fifo", "manifest.json"],
            print_config=False,  # --resume is read when the run starts
        ),
        *[
            Row(f"train_nul_in_{flag}", [f"--{flag}", f"{{rows}}/a{NUL}b"], ["NUL"])
            for flag in ("config", "resume", "record-samples")
        ],
        Row("train_nul_in_set_path", S("run.output_dir", f"{{rows}}/a{NUL}b"), ["NUL"]),
    ]


def _plan_rows() -> list[Row]:
    base = ["--gpus", "8", "--gpu", "h100"]
    custom = ["--gpus", "8", "--gpu", "mygpu", "--efficiency", "0.3"]
    rows = [
        ("memory_inf", [*custom, "--memory-gib", "inf", "--tflops", "300"], "--memory-gib"),
        ("memory_nan", [*custom, "--memory-gib", "nan", "--tflops", "300"], "--memory-gib"),
        ("tflops_inf", [*custom, "--memory-gib", "80", "--tflops", "inf"], "--tflops"),
        (
            "link_nan",
            [*custom, "--memory-gib", "80", "--tflops", "9", "--link-gbps", "nan"],
            "link",
        ),
        ("efficiency_nan", [*base, "--efficiency", "nan"], "--efficiency"),
        ("init_inf", [*base, "--init-minutes", "inf"], "--init-minutes"),
        ("init_nan", [*base, "--init-minutes", "nan"], "--init-minutes"),
        ("init_negative", [*base, "--init-minutes", "-1"], "--init-minutes"),
        ("nic_gbps_nan", [*base, "--nic-gbps", "nan"], "--nic-gbps"),
        ("nic_gbps_inf", [*base, "--nic-gbps", "inf"], "--nic-gbps"),
        ("nics_per_node_zero", [*base, "--nics-per-node", "0"], "--nics-per-node"),
        ("batch_huge_exponent", [*base, "--batch", "1e999999999"], "--batch"),
        ("gpus_5000_digits", ["--gpus", HUGE, "--gpu", "h100"], "--gpus"),
        ("nul_in_write_config", [*base, "--write-config", f"{{rows}}/p{NUL}lan"], "NUL"),
    ]
    return [Row(f"plan_{name}", args, [frag], target="bert.plan") for name, args, frag in rows]


def _download_rows() -> list[Row]:
    # a port nothing listens on: a row the downloader wrongly accepts fails fast, not online
    base = ["{rows}/dl", "--metadata", "http://127.0.0.1:9/bert/bert.uri", "--retries", "0"]
    rows = [
        ("timeout_nan", ["--timeout", "nan"], "--timeout"),
        ("timeout_inf", ["--timeout", "inf"], "--timeout"),
        ("retry_wait_nan", ["--retry-wait", "nan"], "--retry-wait"),
        ("retry_wait_inf", ["--retry-wait", "inf"], "--retry-wait"),
        ("retries_huge_exponent", ["--retries", "1e999999999"], "--retries"),
        ("retries_double_dash", ["--retries=--"], "'--' is not a value"),  # argparse gave []
    ]
    out = [
        Row(f"download_{name}", [*base, *args], [frag], "data.download", "{rows}/dl")
        for name, args, frag in rows
    ]
    nul_args = [f"{{rows}}/d{NUL}l", *base[1:]]
    nul = Row("download_nul_in_out", nul_args, ["NUL"], "data.download", "{rows}/d")
    return [*out, nul]


def _tool_rows() -> list[Row]:
    return [
        Row(
            "prepare_config_is_a_fifo",
            ["vocab", "{inputs}/text.txt", "--config", "{inputs}/fifo.yaml", "--out", "{rows}/v"],
            ["fifo.yaml", "a FIFO"],
            target="scripts/prepare_data.py",
            must_not_exist="{rows}/v",
        ),
        Row(
            "prepare_nul_in_out",
            ["vocab", "{inputs}/text.txt", "--out", f"{{rows}}/v{NUL}x"],
            ["NUL"],
            target="scripts/prepare_data.py",
        ),
        Row(
            "prepare_masked_prob_nan",
            [
                "examples",
                "{inputs}/text.txt",
                "--vocab",
                "{inputs}/text.txt",
                "--out",
                "{rows}/e",
                "--masked-lm-prob",
                "nan",
            ],
            ["--masked-lm-prob", "finite"],
            target="scripts/prepare_data.py",
            must_not_exist="{rows}/e",
        ),
        Row(
            "synthetic_shards_huge_exponent",
            ["--out", "{rows}/syn", "--num-shards", "1e999999999"],
            ["--num-shards", "digits"],
            target="data.synthetic",
            must_not_exist="{rows}/syn",
        ),
        Row(  # the folder's mark of an earlier generation, read before anything is written
            "synthetic_mark_is_a_fifo",
            ["--out", "{inputs}/syn_fifo", "--num-shards", "1", "--samples-per-shard", "4"],
            ["syn_fifo", "did not write"],
            target="data.synthetic",
        ),
        Row(
            "convert_nul_in_out",
            ["nvidia", "{inputs}/text.txt", "--out", f"{{rows}}/c{NUL}x"],
            ["NUL"],
            target="scripts/convert_checkpoint.py",
        ),
        *[
            Row(
                f"convert_bert_config_is_{name}",
                ["nvidia", "{inputs}/empty.pt", "--bert-config", path, "--out", "{rows}/c.pt"],
                [path.split("/")[-1], kind],
                target="scripts/convert_checkpoint.py",
                must_not_exist="{rows}/c.pt",
            )
            for name, path, kind in (
                ("dev_zero", "/dev/zero", "a device"),
                ("a_fifo", "{inputs}/fifo.yaml", "a FIFO"),
            )
        ],
        Row(
            "simulate_ranks_5000_digits",
            ["--ranks", HUGE],
            ["--ranks", "at most"],
            target="scripts/simulate_balance.py",
        ),
    ]


def _mlperf_rows() -> list[Row]:
    """open-bert-package, -check and -plot: the same parser (inputs.Parser) and path checks."""
    package, check, plot = (
        "scripts/package_results.py",
        "scripts/check_compliance.py",
        "scripts/plot_run.py",
    )
    log = "{inputs}/text.txt"
    pkg = [log, "--system", "s", "--out", "{rows}/pkg", "--skip-checks"]
    rows = [
        ("package_nodes_huge_exponent", [*pkg, "--nodes", "1e999999999"], ["--nodes", "digits"]),
        ("package_nodes_5000_digits", [*pkg, "--nodes", HUGE], ["--nodes", "at most"]),
        ("package_nodes_nan", [*pkg, "--nodes", "nan"], ["--nodes", "'nan'"]),
        (
            "package_accelerators_negative",
            [*pkg, "--accelerators-per-node", "-1"],
            ["--accelerators-per-node", ">= 0"],
        ),
        ("package_nul_in_run", [f"{{rows}}/r{NUL}x", *pkg[1:]], ["NUL"]),
        (
            "package_out_is_a_file",
            [log, "--system", "s", "--out", log],
            ["--out", "text.txt", "not a folder"],
        ),
        (
            "package_out_under_a_file",
            [log, "--system", "s", "--out", f"{log}/pkg"],
            ["--out", "text.txt is not a folder"],
        ),
        (
            "package_system_json_is_a_fifo",
            [*pkg, "--system-json", "{inputs}/fifo.yaml"],
            ["--system-json", "a FIFO"],
        ),
        ("package_log_is_dev_zero", ["/dev/zero", *pkg[1:]], ["/dev/zero", "a device"]),
    ]
    out = [Row(n, a, f, target=package, must_not_exist="{rows}/pkg") for n, a, f in rows]
    out += [
        Row("check_log_is_a_fifo", ["{inputs}/fifo.yaml"], ["fifo.yaml", "a FIFO"], check),
        Row("check_nul_in_path", [f"{{rows}}/l{NUL}og"], ["NUL"], check),
        Row(
            "check_unknown_ruleset", [log, "--ruleset", "9.9.9"], ["9.9.9", "no such rules"], check
        ),
        Row("check_ruleset_is_a_path", [log, "--ruleset", "../../x"], ["a version"], check),
        Row(
            "plot_log_is_a_fifo", ["{inputs}/fifo.yaml", "--out", "{rows}/p.png"], ["a FIFO"], plot
        ),
        Row("plot_out_is_a_folder", [log, "--out", "{inputs}"], ["--out", "not a file"], plot),
        Row("plot_out_under_a_file", [log, "--out", f"{log}/p.png"], ["not a folder"], plot),
        Row("plot_nul_in_out", [log, "--out", f"{{rows}}/p{NUL}.png"], ["NUL"], plot),
    ]
    return out


ROWS = [*_config_rows(), *_plan_rows(), *_download_rows(), *_tool_rows(), *_mlperf_rows()]


def _make_inputs(inputs: Path) -> None:
    inputs.mkdir()
    (inputs / "text.txt").write_text("one sentence.\nanother one.\n")
    (inputs / "long_int.yaml").write_text(f"run:\n  max_steps: {HUGE}\n")
    (inputs / "dup_key.yaml").write_text("run:\n  max_steps: 5\n  max_steps: 7\n")
    (inputs / "dup_section.yaml").write_text("run:\n  max_steps: 5\nrun:\n  seed: 1\n")
    (inputs / "octal.yaml").write_text("run:\n  max_steps: 010\n")
    (inputs / "base60.yaml").write_text("run:\n  max_steps: 1:30\n")
    (inputs / "large.yaml").write_text("# padding\n" * (2 * 2**20))  # 20 MiB of comments
    os.mkfifo(inputs / "fifo.yaml")
    import torch  # the rows import it anyway; a checkpoint whose conversion reads the config

    torch.save({"model": {}}, inputs / "empty.pt")
    (inputs / "ckpt_fifo").mkdir()
    os.mkfifo(inputs / "ckpt_fifo" / "manifest.json")
    (inputs / "syn_fifo").mkdir()
    os.mkfifo(inputs / "syn_fifo" / "synthetic.json")


def command(row: Row, paths: dict[str, str]) -> dict:
    args = [a.format(**paths) for a in row.args]
    if row.target == MAIN:
        out = ["--set", f"run.output_dir={paths['rows']}/run"]
        argv = [*(["--print-config"] if row.print_config else []), *out, *args]
        return {"name": row.name, "script": str(ROOT / MAIN), "argv": argv}
    if row.target.endswith(".py"):  # the rows run in their own folder: the script's full path
        return {"name": row.name, "script": str(ROOT / row.target), "argv": args}
    return {"name": row.name, "module": row.target, "argv": args}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("input_rules")
    paths = {"inputs": str(root / "inputs"), "rows": str(root / "rows")}
    _make_inputs(root / "inputs")
    (root / "rows").mkdir()
    return paths


@pytest.fixture(scope="module")
def results(world, tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("input_rules_spec")
    # a FIFO cannot be hashed by the snapshot (its read would block): watch the plain files
    spec = {"watch": [], "rows": [command(row, world) for row in ROWS]}
    (folder / "rows.json").write_text(json.dumps(spec))
    before = _stat_inputs(world["inputs"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "cli_rows.py"),
            *(str(folder / n) for n in ("rows.json", "results.json")),
        ],
        cwd=world["rows"],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,  # each row fails in milliseconds; a hang is a failure
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _stat_inputs(world["inputs"]) == before, "a row changed its inputs"
    return json.loads((folder / "results.json").read_text())


def _stat_inputs(folder: str) -> dict[str, tuple]:
    """(size, mtime) of every input, FIFOs included, without opening one."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in Path(folder).rglob("*")}


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_bad_input(row, world, results):
    result = results[row.name]
    assert_one_error(result["status"], result["stdout"], result["stderr"], row.fragments)
    assert len(result["stderr"].strip().splitlines()) == 1, result["stderr"]
    if row.must_not_exist:
        assert not Path(row.must_not_exist.format(**world)).exists()


# -- the rule itself ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    mantissa=st.integers(0, 10**6),
    exponent=st.integers(-(10**12), 10**12),
    form=st.sampled_from(["{m}e{e}", "{m}E+{e}", "-{m}e{e}", "{m}.0e{e}"]),
)
def test_an_integer_with_any_exponent_is_read_or_refused_at_once(mantissa, exponent, form):
    text = form.format(m=mantissa, e=exponent)
    start = time.monotonic()
    try:
        value = parse_int(text, "run.max_steps")
    except ConfigError as err:
        assert str(err).startswith("run.max_steps=")
    else:
        assert len(str(abs(value))) <= MAX_INT_DIGITS
    assert time.monotonic() - start < 1.0


def test_integers_as_before():
    assert [parse_int(t, "k") for t in ("12", "1e3", "2.0", "1_000", " -4 ")] == [
        12,
        1000,
        2,
        1000,
        -4,
    ]
    assert parse_int(str(2**64), "run.seed") == 2**64  # exactly, not through a float
    for text in ("2.5", "abc", "nan", "inf", "", HUGE, "1e30"):
        with pytest.raises(ConfigError, match="^k="):
            parse_int(text, "k")


def test_floats_finite_and_signed():
    assert parse_float("1e-3", "k") == 0.001
    for text, kw in (("nan", {}), ("inf", {}), ("-inf", {}), ("1e400", {}), ("0", {"low": 0.0})):
        with pytest.raises(ConfigError, match="^k="):
            parse_float(text, "k", **kw)
    assert parse_float("0", "k", low=0.0, inclusive=True) == 0.0


def test_yaml_refusals_name_key_and_line(tmp_path):
    cases = {
        "a:\n  b:\n    c: 1\n    c: 2\n": "'a.b.c' given twice (lines 3 and 4)",
        "run:\n  max_steps: 0o17\n  seed: 0777\n": "run.seed='0777' at line 3",
        "run:\n  lr: 1:30.5\n": "run.lr='1:30.5' at line 2",
        "x: [1, 010]\n": "x[1]='010' at line 1",
    }
    for text, fragment in cases.items():
        path = tmp_path / "c.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match="refused") as err:
            load_config(path)
        assert fragment in str(err.value), str(err.value)


def test_yaml_still_reads_what_1_2_reads_alike(tmp_path):
    path = tmp_path / "ok.yaml"
    # quoted text stays text; 0, hex, a merge key overridden by the mapping's own key
    path.write_text("base: &b {seed: 1}\nrun:\n  <<: *b\n  seed: 0\n  max_steps: 0x10\n")
    with pytest.raises(ConfigError, match="unknown config key 'base'"):
        load_config(path)  # the YAML itself was read: the unknown key is the config's verdict
    path.write_text('run:\n  seed: 0\n  max_steps: 0x10\nsubmission:\n  org: "010"\n')
    cfg = load_config(path)
    assert (cfg.run.seed, cfg.run.max_steps, cfg.submission.org) == (0, 16, "010")


def test_input_files_are_regular_and_capped(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, fragment in (("/dev/zero", "a device"), (fifo, "a FIFO"), (tmp_path, "a folder")):
        with pytest.raises(BadInputError, match=fragment):
            read_regular(path, "config file")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(BadInputError, match="more than 100"):
        read_regular(big, "config file", max_bytes=100)
    assert read_regular(big, "config file", max_bytes=101) == b"x" * 101
    with pytest.raises(BadInputError, match="NUL"):
        read_regular(f"{tmp_path}/a{NUL}b", "config file")


def test_output_and_input_paths_are_judged_before_use(tmp_path):
    from bert.core.inputs import check_output_path, check_regular

    fifo, text = tmp_path / "fifo", tmp_path / "text"
    os.mkfifo(fifo)
    text.write_text("x")
    for path, fragment in ((fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path, "a folder")):
        with pytest.raises(BadInputError, match=fragment):
            check_regular(path, "log")
    with pytest.raises(BadInputError, match="No such file"):
        check_regular(tmp_path / "nope", "log")
    with pytest.raises(BadInputError, match="more than 0"):
        check_regular(text, "log", max_bytes=0)
    check_regular(text, "log")
    cases = (
        (text, True, "not a folder"),
        (tmp_path, False, "not a file"),
        (text / "sub" / "deeper", True, "text is not a folder"),
        (f"{tmp_path}/a{NUL}b", True, "NUL"),
    )
    for path, folder, fragment in cases:
        with pytest.raises(BadInputError, match=fragment):
            check_output_path(path, "--out", folder=folder)
    check_output_path(tmp_path / "new" / "deeper", "--out", folder=True)
    check_output_path(text, "--out", folder=False)  # a file the command replaces
