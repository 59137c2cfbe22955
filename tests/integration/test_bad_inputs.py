"""Every bad input: exit status 2, one `error:` line naming it, no traceback, nothing changed.

One row per class of bad input, for run_pretraining.py and the scripts. Each row must
- exit with status 2;
- print exactly one `error:` line (argparse's `PROG: error:` counts), holding the row's
  fragments (the file, the field, the value), and no traceback;
- leave every file of an earlier run untouched: a real tiny run (with checkpoints) is made once
  per session, every file under it, its data and the rows' inputs is snapshot (bytes and
  mtime) and compared after each row; rows that name a new output folder must not create it.

The rows that fail before training run in one interpreter (tests/cli_rows.py: runpy per row,
as `python SCRIPT` would), so the table costs one torch import, not one per row; the
torchrun row runs the real launcher with 2 ranks.

Rows whose error comes after run_start (a token id of a shard read by the data thread, a
checkpoint that does not fit the model built at init) write their own aborted MLPerf log, so
they use a folder of their own rather than the earlier run's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest

from data.synthetic import generate
from cli_rows import changed_paths, snapshot
from commands import assert_one_error

ROOT = Path(__file__).resolve().parents[2]
MAIN = "run_pretraining.py"
# The earlier run and most rows: a 2-step run of a 1-layer BERT on 2 shards of 64 samples.
SHAPE = {
    "model.vocab_size": 128,
    "model.hidden_size": 32,
    "model.intermediate_size": 64,
    "model.num_hidden_layers": 1,
    "model.max_position_embeddings": 64,
    "data.max_seq_length": 64,
    "data.max_predictions_per_seq": 10,
    "run.global_batch_size": 8,
    "run.max_steps": 2,
    "eval.samples": 64,
    "run.threads": 1,
    "data.synthetic.enabled": "false",
    "log.interval_s": 1000,
}
CKPT = "{run}/checkpoints/step_00000002"


@dataclass(frozen=True)
class Row:
    name: str
    args: list[str]  # {data} {run} {inputs} {rows} {ckpt} are filled in
    fragments: list[str]  # each must be in the error line
    target: str = MAIN  # a script path (relative to the repo) or a module name (no .py)
    env: dict[str, str] = field(default_factory=dict)
    must_not_exist: str = ""  # an output the failed command must not have created


def S(key: str, value: str) -> list[str]:
    return ["--set", f"{key}={value}"]


ROWS = [
    # -- config ----------------------------------------------------------------------------
    Row("unknown_key", S("run.nope", "1"), ["unknown config key 'run.nope'"]),
    Row("bad_value_type", S("run.max_steps", "abc"), ["run.max_steps='abc'", "an integer"]),
    Row("bad_choice", S("run.precision", "fp8"), ["run.precision='fp8'", "bf16"]),
    Row("missing_config_file", ["--config", "{inputs}/nope.yaml"], ["nope.yaml"]),
    Row("invalid_yaml", ["--config", "{inputs}/broken.yaml"], ["broken.yaml", "invalid YAML"]),
    Row("negative_batch", S("run.global_batch_size", "-8"), ["run.global_batch_size=-8"]),
    Row("zero_eval_batch", S("eval.batch_size", "0"), ["eval.batch_size=0"]),
    Row(
        "batch_does_not_split_over_ranks",
        S("run.global_batch_size", "9"),
        ["run.global_batch_size=9", "world size 2"],
        env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
    ),
    Row(
        "batch_does_not_split_over_accumulation",
        S("run.gradient_accumulation_steps", "3"),
        ["run.gradient_accumulation_steps=3"],
    ),
    Row(
        "closed_division_curriculum",
        S("data.curriculum.name", "shuffled"),
        ["data.curriculum.name", "submission.division=open"],
    ),
    Row(
        "cuda_without_gpu",
        [*S("run.device", "cuda"), *S("model.attention", "padded_sdpa")],
        ["run.device=cuda", "no CUDA device"],
    ),
    # attention backend, fused kernels, device and precision that cannot run together: refused
    # by the config, before the log is opened (run.device=cuda is judged before the GPU check)
    Row(
        "per_sequence_on_cuda",
        [*S("run.device", "cuda"), *S("model.attention", "per_sequence")],
        ["model.attention=per_sequence", "run.device=cuda"],
    ),
    Row(
        "flash_varlen_on_cpu",
        [*S("run.device", "cpu"), *S("model.attention", "flash_varlen")],
        ["model.attention=flash_varlen", "run.device=cpu"],
    ),
    Row(
        "flash_varlen_in_fp32",
        [
            *S("run.device", "cuda"),
            *S("model.attention", "flash_varlen"),
            *S("run.precision", "fp32"),
        ],
        ["model.attention=flash_varlen", "run.precision=fp32"],
    ),
    Row(
        "fused_flag_in_fp32_on_cuda",
        [
            *S("run.device", "cuda"),
            *S("model.attention", "padded_sdpa"),
            *S("model.fused_embedding_backward", "true"),
            *S("model.hidden_size", "1024"),
            *S("model.num_attention_heads", "16"),
        ],
        ["model.fused_embedding_backward=true", "run.precision=fp32"],
    ),
    # values that used to fail deep inside torch or numpy, or train to NaN
    Row(
        "zero_attention_heads",
        S("model.num_attention_heads", "0"),
        ["model.num_attention_heads=0", "in (0, 4096]"],
    ),
    Row("negative_threads", S("run.threads", "-1"), ["run.threads=-1", "in [0, 4096]"]),
    Row(
        "nan_initializer_range",
        S("model.initializer_range", "nan"),
        ["model.initializer_range=nan", "finite"],
    ),
    Row(
        "negative_initializer_range",
        S("model.initializer_range", "-0.02"),
        ["model.initializer_range=-0.02", "in (0, 1e+30]"],
    ),
    Row("seed_beyond_64_bits", S("run.seed", str(2**64)), [f"run.seed={2**64}"]),
    Row(
        "absurd_vocabulary", S("model.vocab_size", "10000000000"), ["model.vocab_size=10000000000"]
    ),
    Row("infinite_lr", S("optim.lr", "inf"), ["optim.lr=inf", "finite"]),
    Row("nan_eps", S("optim.eps", "nan"), ["optim.eps=nan", "finite"]),
    Row("integer_given_as_fraction", S("run.max_steps", "2.5"), ["run.max_steps='2.5'"]),
    Row("empty_output_dir", S("run.output_dir", ""), ["run.output_dir=''", "empty"]),
    Row(
        "output_dir_is_a_file",
        S("run.output_dir", "{inputs}/text.pt"),
        ["run.output_dir=", "text.pt", "cannot write there"],
    ),
    # a folder nobody may write into, root included (chmod cannot make one for root)
    Row(
        "output_dir_unwritable",
        S("run.output_dir", "/proc/open_bert_out"),
        ["run.output_dir=", "/proc/open_bert_out", "cannot write there"],
    ),
    Row("config_not_utf8", ["--config", "{inputs}/latin1.yaml"], ["latin1.yaml", "not UTF-8"]),
    Row("config_is_a_folder", ["--config", "{inputs}/empty"], ["empty", "is a folder"]),
    *[
        Row(
            f"section_given_as_{name}",
            ["--config", f"{{inputs}}/section_{name}.yaml"],
            ["submission: expected a mapping of its keys"],
        )
        for name in ("zero", "list", "false")
    ],
    Row(
        "yaml_alias_bomb",
        ["--config", "{inputs}/alias_bomb.yaml"],
        ["alias_bomb.yaml", "aliases expand to more than"],
    ),
    Row(
        "synthetic_vocab_refused_by_the_generator",
        [
            *S("data.synthetic.enabled", "true"),
            *S("model.vocab_size", "50"),
            *S("data.train_dir", ""),
            *S("data.synthetic.cache_dir", "{rows}/synthetic_cache"),
        ],
        ["model.vocab_size=50", "synthetic data"],
        must_not_exist="{rows}/synthetic_cache",
    ),
    Row(
        "absurd_layer_count",
        S("model.num_hidden_layers", "100000"),
        ["model.num_hidden_layers=100000"],
    ),
    Row(
        "bert_config_wrong_shape",
        S("model.bert_config_file", "{inputs}/bert_config_list.json"),
        ["bert_config_list.json", "expected a JSON object, got array"],
    ),
    Row(
        "bert_config_not_utf8",
        S("model.bert_config_file", "{inputs}/latin1.yaml"),
        ["latin1.yaml", "not UTF-8"],
    ),
    Row(
        "bert_config_wrong_value",
        S("model.bert_config_file", "{inputs}/bert_config_bad.json"),
        ["model.hidden_size=[1024]"],
    ),
    # -- data ------------------------------------------------------------------------------
    Row(
        "missing_eval_file",
        S("data.eval_file", "{inputs}/nope.hdf5"),
        ["nope.hdf5", "data.eval_file", "does not exist"],
    ),
    Row("eval_file_is_a_folder", S("data.eval_file", "{data}"), ["data.eval_file", "is a folder"]),
    Row(
        "missing_train_dir", S("data.train_dir", "{inputs}/nowhere"), ["nowhere", "data.train_dir"]
    ),
    Row(
        "train_dir_is_a_file",
        S("data.train_dir", "{inputs}/text.pt"),
        ["text.pt", "data.train_dir is a file"],
    ),
    Row(
        "train_dir_without_shards", S("data.train_dir", "{inputs}/empty"), ["empty", "part_*.hdf5"]
    ),
    Row(
        "token_id_above_vocab",
        [*S("data.train_dir", "{inputs}/bad_input_ids"), *S("run.output_dir", "{rows}/token_id")],
        ["bad_input_ids/part_", "input_ids value 500", "model.vocab_size=128"],
    ),
    Row(
        "label_id_above_vocab",
        [*S("data.train_dir", "{inputs}/bad_labels"), *S("run.output_dir", "{rows}/label_id")],
        ["bad_labels/part_", "masked_lm_ids value 500", "model.vocab_size=128"],
    ),
    # -- init checkpoint -------------------------------------------------------------------
    Row(
        "init_checkpoint_missing",
        S("run.init_checkpoint", "{inputs}/nope.pt"),
        ["nope.pt", "does not exist"],
    ),
    Row(
        "init_checkpoint_text",
        S("run.init_checkpoint", "{inputs}/text.pt"),
        ["text.pt", "not a PyTorch checkpoint"],
    ),
    Row(
        "init_checkpoint_truncated",
        S("run.init_checkpoint", "{inputs}/truncated.pt"),
        ["truncated.pt", "cannot read"],
    ),
    Row(
        "init_checkpoint_bad_safetensors",
        S("run.init_checkpoint", "{inputs}/bad.safetensors"),
        ["bad.safetensors", "safetensors"],
    ),
    Row(  # the right format, the wrong dtype: integers would be cast without a word
        "init_checkpoint_integer_weights",
        S("run.init_checkpoint", "{inputs}/integer_weights.pt"),
        ["integer_weights.pt", "dtype torch.int64"],
    ),
    Row(
        "init_checkpoint_nan_weights",
        S("run.init_checkpoint", "{inputs}/nan_weights.pt"),
        ["nan_weights.pt", "NaN or infinite"],
    ),
    Row(
        "init_checkpoint_is_step_folder",
        S("run.init_checkpoint", CKPT),
        ["training checkpoint folder", "--resume", "trainer.pt"],
    ),
    Row(
        "init_checkpoint_other_shape",
        [
            *S("run.init_checkpoint", CKPT + "/trainer.pt"),
            *S("model.hidden_size", "64"),
            *S("run.output_dir", "{rows}/other_shape"),
        ],
        ["trainer.pt", "has shape", "model config"],
    ),
    # -- resume ----------------------------------------------------------------------------
    Row("resume_missing_folder", ["--resume", "{inputs}/nope"], ["nope", "no such folder"]),
    Row("resume_not_a_checkpoint", ["--resume", "{data}"], ["manifest.json"]),
    Row(
        "resume_other_model_shape",
        ["--resume", CKPT, *S("model.hidden_size", "64")],
        ["step_00000002", "model.hidden_size=32", "model.hidden_size=64"],
    ),
    Row(
        "resume_sharded_toggled",
        ["--resume", CKPT, *S("optim.sharded", "true")],
        ["optim.sharded=False", "optim.sharded=True"],
    ),
    Row(
        "resume_other_precision",
        ["--resume", CKPT, *S("run.precision", "bf16")],
        ["run.precision='fp32'", "run.precision='bf16'"],
    ),
    Row(
        "resume_other_global_batch",
        ["--resume", CKPT, *S("run.global_batch_size", "16")],
        ["run.global_batch_size=8", "16"],
    ),
    # damaged resume state, refused before anything is written (bert/core/readers.py)
    Row(
        "resume_trainer_not_a_pickle",
        ["--resume", "{inputs}/ckpt_not_pickle"],
        ["ckpt_not_pickle/trainer.pt", "cannot read"],
    ),
    Row(
        "resume_manifest_missing_keys",
        ["--resume", "{inputs}/ckpt_manifest_keys"],
        ["ckpt_manifest_keys/manifest.json", "no 'seed'"],
    ),
    Row(
        "resume_manifest_not_json",
        ["--resume", "{inputs}/ckpt_manifest_garbage"],
        ["ckpt_manifest_garbage/manifest.json", "not valid JSON"],
    ),
    Row(
        "resume_config_wrong_shape",
        ["--resume", "{inputs}/ckpt_config_list"],
        ["ckpt_config_list/config.json", "expected a JSON object, got array"],
    ),
    Row(
        "resume_state_without_model",
        ["--resume", "{inputs}/ckpt_no_model"],
        ["ckpt_no_model/trainer.pt", "no 'model'"],
    ),
    Row(
        "resume_rank_file_truncated",
        ["--resume", "{inputs}/ckpt_rank_truncated"],
        ["ckpt_rank_truncated/rank_00000.pt", "cannot read"],
    ),
    # -- scripts ---------------------------------------------------------------------------
    Row(
        "synthetic_into_folder_with_other_shards",
        ["--out", "{data}"],
        ["data"],
        target="data.synthetic",
    ),
    Row(
        "synthetic_zero_shards",
        ["--out", "{rows}/synthetic", "--num-shards", "0"],
        ["num_shards=0"],
        target="data.synthetic",
        must_not_exist="{rows}/synthetic",
    ),
    Row(
        "hf_export_without_config",
        ["hf-export", "{inputs}/lone/trainer.pt", "--out", "{rows}/hf"],
        ["trainer.pt", "pass the training checkpoint folder", "--config"],
        target="scripts/convert_checkpoint.py",
        must_not_exist="{rows}/hf",
    ),
    Row(
        "hf_export_bad_file",
        ["hf-export", "{inputs}/text.pt", "--out", "{rows}/hf2"],
        ["text.pt", "not a PyTorch checkpoint"],
        target="scripts/convert_checkpoint.py",
        must_not_exist="{rows}/hf2",
    ),
    Row(
        "prepare_binary_vocab",
        [
            "examples",
            "{inputs}/part-00000",
            "--vocab",
            "{inputs}/vocab.bin",
            "--out",
            "{rows}/examples",
        ],
        ["vocab.bin", "not UTF-8"],
        target="scripts/prepare_data.py",
        must_not_exist="{rows}/examples",
    ),
    # -- outputs that are not ours --------------------------------------------------------------
    Row(
        "prepare_out_is_its_input",
        ["to-varlen", "{data}", "--out", "{data}"],
        ["--out", "overlaps the input"],
        target="scripts/prepare_data.py",
    ),
    Row(
        "prepare_out_file_exists",
        ["pick-eval", "{data}/eval.hdf5", "--out", "{inputs}/text.pt"],
        ["text.pt", "already exists", "--force"],
        target="scripts/prepare_data.py",
    ),
    Row(
        "package_system_reaches_outside",
        ["{run}", "--system", "../../victim", "--out", "{rows}/pkg", "--force", "--skip-checks"],
        ["--system", "../../victim", "plain name"],
        target="scripts/package_results.py",
        must_not_exist="{rows}/pkg",
    ),
    Row(
        "record_samples_over_earlier_run",
        ["--record-samples", "{inputs}/records"],
        ["--record-samples", "rank0.txt", "earlier run"],
    ),
    # `--resume auto` with no checkpoint yet is a fresh start: it must not overwrite them either
    Row(
        "record_samples_resume_auto_without_checkpoint",
        [
            "--record-samples",
            "{inputs}/records",
            "--resume",
            "auto",
            *S("run.output_dir", "{rows}/fresh"),
        ],
        ["--record-samples", "rank0.txt", "earlier run"],
    ),
    Row(
        "convert_out_file_exists",
        ["nvidia", "{inputs}/text.pt", "--out", "{inputs}/bad.safetensors"],
        ["bad.safetensors", "already exists"],
        target="scripts/convert_checkpoint.py",
    ),
    Row(
        "hf_export_into_foreign_folder",
        ["hf-export", CKPT + "/trainer.pt", "--out", "{data}"],
        ["did not write", "part_"],
        target="scripts/convert_checkpoint.py",
    ),
    Row(
        "simulate_zero_ranks", ["--ranks", "0"], ["--ranks=0"], target="scripts/simulate_balance.py"
    ),
    Row(
        "simulate_ranks_not_whole_nodes",
        ["--ranks", "12", "--ranks-per-node", "8"],
        ["--ranks=12", "--ranks-per-node=8"],
        target="scripts/simulate_balance.py",
    ),
    Row(
        "simulate_negative_batch",
        ["--local-batch", "-4"],
        ["--local-batch=-4"],
        target="scripts/simulate_balance.py",
    ),
]


def base_args(paths: dict[str, str]) -> list[str]:
    args = ["--quiet"]
    for key, value in {
        **SHAPE,
        "data.train_dir": paths["data"],
        "data.eval_file": f"{paths['data']}/eval.hdf5",
        "run.output_dir": paths["run"],
    }.items():
        args += S(key, str(value))
    return args


def command(row: Row, paths: dict[str, str]) -> dict:
    """The row as tests/cli_rows.py runs it."""
    args = [a.format(**paths) for a in row.args]
    if row.target == MAIN:
        return {"name": row.name, "script": MAIN, "argv": base_args(paths) + args, "env": row.env}
    if row.target.endswith(".py"):
        return {"name": row.name, "script": row.target, "argv": args, "env": row.env}
    return {"name": row.name, "module": row.target, "argv": args, "env": row.env}


# -- the world the rows fail in -------------------------------------------------------------


def _edit_first_value(folder: Path, name: str, value: int) -> None:
    """Sample 3 of every shard gets `value` as its field `name`'s first (or second) entry."""
    for shard in folder.glob("part_*.hdf5"):
        with h5py.File(shard, "r+") as f:
            column = f[name][:]
            column[3] = column[3].copy()
            column[3][min(1, len(column[3]) - 1)] = value
            del f[name]
            f.create_dataset(name, data=column, dtype=h5py.vlen_dtype(np.int16))


def _make_inputs(inputs: Path, data: Path, trainer_pt: Path) -> None:
    inputs.mkdir()
    (inputs / "empty").mkdir()
    (inputs / "records").mkdir()  # an earlier run's --record-samples trail
    (inputs / "records" / "rank0.txt").write_text("0 part_00000.hdf5 3\n")
    (inputs / "text.pt").write_text("not a checkpoint\n")
    (inputs / "bad.safetensors").write_text("not safetensors either\n")
    (inputs / "truncated.pt").write_bytes(trainer_pt.read_bytes()[:4000])
    _make_garbage_weights(inputs, trainer_pt)
    # a training checkpoint's weights without the config.json beside them
    (inputs / "lone").mkdir()
    (inputs / "lone" / "trainer.pt").write_bytes(trainer_pt.read_bytes())
    (inputs / "broken.yaml").write_text("run: [unclosed\n")
    (inputs / "vocab.bin").write_bytes(bytes(range(256)) * 4)
    (inputs / "part-00000").write_text("one sentence.\nanother one.\n\nnext document.\n")
    for name, field_name in (("bad_input_ids", "input_ids"), ("bad_labels", "masked_lm_ids")):
        shutil.copytree(data, inputs / name)
        _edit_first_value(inputs / name, field_name, 500)
    _make_config_inputs(inputs)
    _make_damaged_checkpoints(inputs, trainer_pt.parent)


def _make_garbage_weights(inputs: Path, trainer_pt: Path) -> None:
    """The earlier run's weights as integers, and as NaN: readable files, unusable weights."""
    import torch

    weights = torch.load(trainer_pt, map_location="cpu", weights_only=False)["model"]
    torch.save({"model": {k: v.long() for k, v in weights.items()}}, inputs / "integer_weights.pt")
    nan = {k: torch.full_like(v, float("nan")) for k, v in weights.items()}
    torch.save({"model": nan}, inputs / "nan_weights.pt")


def _make_config_inputs(inputs: Path) -> None:
    (inputs / "latin1.yaml").write_bytes("run:\n  output_dir: caf\u00e9\n".encode("latin-1"))
    for name, value in (("zero", "0"), ("list", "[]"), ("false", "false")):
        (inputs / f"section_{name}.yaml").write_text(f"submission: {value}\n")
    # 9 levels of 9 aliases: 9**9 (387 million) strings in 1 KB; the value of a real key
    bomb = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    (inputs / "alias_bomb.yaml").write_text(
        "submission:\n  org:\n" + "".join(f"    {line}\n" for line in bomb)
    )
    (inputs / "bert_config_list.json").write_text("[1024, 16]")
    (inputs / "bert_config_bad.json").write_text('{"hidden_size": [1024]}')


def _make_damaged_checkpoints(inputs: Path, ckpt: Path) -> None:
    """Copies of the earlier run's last checkpoint, each damaged one way."""
    import torch

    def copy(name: str) -> Path:
        return Path(shutil.copytree(ckpt, inputs / name))

    (copy("ckpt_not_pickle") / "trainer.pt").write_text("not a pickle\n")
    manifest = json.loads((ckpt / "manifest.json").read_text())
    (copy("ckpt_manifest_keys") / "manifest.json").write_text(
        json.dumps({k: v for k, v in manifest.items() if k != "seed"})
    )
    (copy("ckpt_manifest_garbage") / "manifest.json").write_text('{"format": "open-')
    (copy("ckpt_config_list") / "config.json").write_text("[]")
    state = torch.load(ckpt / "trainer.pt", weights_only=False)
    del state["model"]
    torch.save(state, copy("ckpt_no_model") / "trainer.pt")
    rank = copy("ckpt_rank_truncated") / "rank_00000.pt"
    rank.write_bytes(rank.read_bytes()[:100])


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    """Data, an earlier run's folder (real 2-step run, checkpoints at steps 1 and 2), inputs."""
    root = tmp_path_factory.mktemp("bad_inputs")
    paths = {name: str(root / name) for name in ("data", "run", "inputs", "rows")}
    paths["ckpt"] = CKPT.format(**paths)
    generate(
        paths["data"],
        num_shards=2,
        samples_per_shard=64,
        eval_samples=64,
        max_seq_length=64,
        max_predictions=10,
        vocab_size=128,
        seed=3,
    )
    proc = subprocess.run(
        [sys.executable, MAIN, *base_args(paths), *S("checkpoint.interval_steps", "1")],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # a 2-step budget
    assert (Path(paths["ckpt"]) / "manifest.json").is_file()
    _make_inputs(root / "inputs", root / "data", Path(paths["ckpt"]) / "trainer.pt")
    return paths


def watched(paths: dict[str, str]) -> list[str]:
    return [paths["data"], paths["run"], paths["inputs"]]


@pytest.fixture(scope="module")
def results(world, tmp_path_factory) -> dict[str, dict]:
    """Every row's status, output and changed files, from one tests/cli_rows.py process."""
    folder = tmp_path_factory.mktemp("rows_spec")
    spec = {"watch": watched(world), "rows": [command(row, world) for row in ROWS]}
    (folder / "rows.json").write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "cli_rows.py"),
            str(folder / "rows.json"),
            str(folder / "results.json"),
        ],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((folder / "results.json").read_text())


def test_the_table_covers_25_classes():
    assert len(ROWS) >= 25 and len({row.name for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_bad_input(row, world, results):
    result = results[row.name]
    assert_one_error(result["status"], result["stdout"], result["stderr"], row.fragments)
    assert len(result["stderr"].strip().splitlines()) == 1, result["stderr"]  # nothing else
    assert result["changed"] == [], f"changed files of the earlier run: {result['changed']}"
    if row.must_not_exist:
        assert not Path(row.must_not_exist.format(**world)).exists()


def test_resume_with_another_world_size_under_torchrun(world):
    """A 1-rank checkpoint resumed by 2 torchrun ranks through launch/torchrun.sh: both ranks
    fail alike, one `error:` line, and the launcher exits with the workers' status 2 (torchrun
    itself would say 1)."""
    before = snapshot(watched(world))
    env = {
        **os.environ,
        "NPROC_PER_NODE": "2",
        "CLEAR_CACHE": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "launch" / "torchrun.sh"),
            str(ROOT / "configs" / "tiny_cpu.yaml"),
            *base_args(world),
            "--resume",
            world["ckpt"],
        ],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert_one_error(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        ["step_00000002", "saved by 1 ranks", "this job has 2"],
    )
    assert changed_paths(before, snapshot(watched(world))) == []


def test_a_bad_shard_found_mid_run_under_torchrun_is_one_error_line(world):
    """A token id beyond the vocabulary, found by a data thread after run_start, with 2 torchrun
    ranks: whichever ranks meet it, the user sees one `error:` line (the peer
    rank's traceback used to follow it) and the launcher exits 2; the earlier run's files stay."""
    before = snapshot(watched(world))
    env = {
        **os.environ,
        "NPROC_PER_NODE": "2",
        "CLEAR_CACHE": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHON": sys.executable,
    }
    out = Path(world["rows"]) / "torchrun_bad_shard"
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "launch" / "torchrun.sh"),
            str(ROOT / "configs" / "tiny_cpu.yaml"),
            *base_args(world),
            *S("data.train_dir", f"{world['inputs']}/bad_input_ids"),
            *S("run.output_dir", str(out)),
        ],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert_one_error(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        ["bad_input_ids/part_", "input_ids value 500", "model.vocab_size=128"],
    )
    assert changed_paths(before, snapshot(watched(world))) == []
