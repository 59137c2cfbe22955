"""A key given twice in one JSON object is refused, with the file and the key, by every reader
of JSON a user can hand the program (bert/core/readers.py: read_json for whole files,
parse_json for one record of a log or a metrics.jsonl). Python's json keeps the last value
silently, so a hand-edited manifest or a forged MLPerf record could say two things at once.

The structural test keeps it that way: outside readers.py, bert/ and data/ call json.load(s)
only on what they made themselves (listed below with the reason).
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest

from bert.core.errors import BadInputError, CheckpointError, ConfigError
from bert.core.readers import parse_json, read_json

ROOT = Path(__file__).resolve().parents[2]
# file -> why its json.load(s) reads nothing a user hands it
OWN_JSON = {
    "bert/core/readers.py": "the shared reader itself",
    "bert/plan/scale.py": "the package's own data file (published measurements)",
    "bert/plan/validate.py": "the planner's own JSON output, read back in one process",
    "bert/plan/collect_published.py": "a maintainer's tool over the MLCommons results repos",
    "bert/tools/curriculum_experiment.py": "the experiment's own cache mark, compared whole",
}
OWN_FOLDERS = ("bert/tools/gpu/",)  # the GPU harness reads back its own step records


def json_reads(path: Path) -> list[int]:
    """Lines of `path` calling json.load or json.loads on anything but json.dumps(...) (a
    round trip that normalizes a value the program made)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("load", "loads")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "json"
        ):
            arg = node.args[0] if node.args else None
            dumps = (
                isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "dumps"
            )
            if not dumps:
                lines.append(node.lineno)
    return lines


def test_user_json_is_read_only_through_the_shared_readers():
    found = []
    for part in ("bert", "data"):
        for path in sorted((ROOT / part).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in OWN_JSON or name.startswith(OWN_FOLDERS):
                continue
            found += [f"{name}:{line}" for line in json_reads(path)]
    assert not found, f"json.load(s) outside bert/core/readers.py: {found}"


def test_the_structural_check_finds_a_direct_read(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("import json\nv = json.loads(text)\nw = json.loads(json.dumps(v))\n")
    assert json_reads(path) == [2]


# -- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, key",
    [
        ('{"step": 1, "step": 2}', "step"),
        ('{"a": {"b": 1, "b": 1}}', "b"),  # nested, even with the same value
        ('[{"x": 0}, {"x": 1, "y": 2, "x": 3}]', "x"),
    ],
)
def test_a_key_given_twice_is_refused_with_file_and_key(tmp_path, text, key):
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(CheckpointError) as refused:
        read_json(path, "checkpoint manifest", CheckpointError, expect=object)
    message = str(refused.value)
    assert str(path) in message and f"key '{key}' given twice" in message, message


def test_distinct_keys_and_arrays_read_as_before(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text('{"a": [1, 1], "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}')
    assert read_json(path, "x") == {"a": [1, 1], "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}
    assert parse_json('{"k": 1}', "line 3") == {"k": 1}
    with pytest.raises(ConfigError, match=r"^metrics.jsonl: line 3: not valid JSON"):
        parse_json("{", "metrics.jsonl: line 3")


# -- each reader a command runs ----------------------------------------------------------------

RECORD = (
    '{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "%s", '
    '"value": null, "metadata": {"status": "success"%s}}'
)


def test_an_mlperf_record_with_a_key_twice_is_refused(tmp_path):
    """The packager, the checker and the plotter read logs through checked_lines: a run_stop
    whose status is given twice could pass here and fail there."""
    from bert.submission.reader import LogError, checked_lines, mllog_records

    log = tmp_path / "result_0.txt"
    line = ":::MLLOG " + RECORD % ("run_stop", ', "status": "aborted"')
    log.write_text(":::MLLOG " + RECORD % ("run_start", "") + "\n" + line + "\n")
    with pytest.raises(LogError, match=r"result_0.txt: line 2 .*key 'status' given twice"):
        checked_lines(log)
    with pytest.raises(LogError, match="key 'status' given twice"):
        mllog_records(log.read_text())


def test_a_system_json_with_a_key_twice_is_refused(tmp_path):
    from bert.submission import system_desc
    from bert.submission.reader import Run

    path = tmp_path / "system.json"
    path.write_text('{"number_of_nodes": "1", "number_of_nodes": "64"}')
    args = argparse.Namespace(
        system="s",
        submitter=None,
        division="open",
        nodes=None,
        accelerators_per_node=None,
        accelerator=None,
        field=[],
        system_json=str(path),
    )
    with pytest.raises(system_desc.DescriptionError, match="key 'number_of_nodes' given twice"):
        run = Run(Path("result_0.txt"), 1, True, "success", 1.0, "org", "open", "onprem", 8, None)
        system_desc.describe(args, [run], None)


def test_a_metrics_record_with_a_key_twice_is_refused(tmp_path):
    from bert.submission.metrics_plot import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"kind": "train", "samples": 8}\n{"kind": "train", "samples": 8, "samples": 9}\n'
    )
    with pytest.raises(BadInputError, match=r"metrics.jsonl: line 2: key 'samples' given twice"):
        read_metrics(path)


def test_a_run_record_with_a_key_twice_is_not_ours(tmp_path):
    """run.json in an output folder: one that says two things was not written by this program,
    so a run would not rename it away without --force."""
    from bert.train.own_files import WRITER, is_ours

    path = tmp_path / "run.json"
    path.write_text(json.dumps({"written_by": WRITER}))
    assert is_ours(path)
    path.write_text(f'{{"written_by": "{WRITER}", "written_by": "{WRITER}"}}')
    assert not is_ours(path)


def test_a_bert_config_with_a_key_twice_is_refused(tmp_path):
    from bert.config import load_config

    path = tmp_path / "bert_config.json"
    path.write_text('{"hidden_size": 32, "hidden_size": 64}')
    with pytest.raises(ConfigError, match=r"bert_config.json'.*key 'hidden_size' given twice"):
        load_config(None, [f"model.bert_config_file={path}"])
