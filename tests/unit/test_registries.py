"""The registries are the single truth: a new balance strategy, attention backend or optimizer
is one record in one file (an optimizer on the sharded path: its record plus its update
function), and the whole program picks it up. Each dummy here is registered the way a new entry
would be and trains 2 steps through the Trainer on the CPU."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bert.config import load_config
from bert.model import attention
from bert.optim import registry, shard_update
from bert.train.trainer import Trainer
from data.order import strategies
from data.synthetic import generate
from kernels.reference_lamb import apply_update


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("registry_data")
    generate(
        folder,
        num_shards=2,
        samples_per_shard=32,
        eval_samples=16,
        max_seq_length=32,
        max_predictions=5,
        vocab_size=128,
        seed=3,
    )
    return folder


def train_two_steps(data_dir, tmp_path, *extra) -> Trainer:
    cfg = load_config(
        None,
        [
            "model.vocab_size=128",
            "model.hidden_size=16",
            "model.num_hidden_layers=1",
            "model.num_attention_heads=2",
            "model.intermediate_size=32",
            "model.max_position_embeddings=32",
            "data.max_seq_length=32",
            "data.max_predictions_per_seq=5",
            f"data.train_dir={data_dir}",
            f"data.eval_file={data_dir / 'eval.hdf5'}",
            "run.global_batch_size=4",
            "run.max_steps=2",
            "eval.interval_samples=8",
            "eval.samples=16",
            "run.device=cpu",
            "run.seed=1",
            f"run.output_dir={tmp_path}",
            "log.quiet=true",
            "schedule.total_steps=10",
            *extra,
        ],
    )
    trainer = Trainer(cfg)
    before = [p.detach().clone() for p in trainer.raw_model.parameters()]
    result = trainer.train()
    assert result.steps == 2 and np.isfinite(result.eval_accuracy)
    moved = [not torch.equal(a, b) for a, b in zip(before, trainer.raw_model.parameters())]
    assert any(moved)
    return trainer


def test_a_new_balance_strategy_is_one_record(data_dir, tmp_path, monkeypatch):
    dealt = []

    def deal_reversed(lengths, world_size, ranks_per_node):
        dealt.append(len(lengths))
        order = np.argsort(-np.asarray(lengths), kind="stable")
        return order.reshape(world_size, -1)

    monkeypatch.setitem(
        strategies.STRATEGIES,
        "longest_first",
        strategies.Strategy(deal_reversed, source="shards", scope="world"),
    )
    train_two_steps(data_dir, tmp_path, "data.balance=longest_first")
    assert dealt  # the pipeline dealt with the new record's function


def test_a_new_attention_backend_is_one_record(data_dir, tmp_path, monkeypatch):
    calls = []

    def attend(q, k, v, batch, dropout_p):
        calls.append(q.shape[0])
        return attention.per_sequence_attention(q, k, v, batch.cu_seqlens, dropout_p)

    backend = attention.AttentionBackend("counted", attend, attend)
    monkeypatch.setitem(attention.BACKENDS, "counted", backend)
    train_two_steps(data_dir, tmp_path, "model.attention=counted")
    assert calls


def sgd_update(shard, inputs, reduce_sums) -> None:
    """Plain SGD on one shard: w -= lr * (unscaled, clipped) g; the overflow skip kept."""
    shard.update.copy_(shard.grad.float() * inputs.coef)
    apply_update(shard.groups, inputs.lrs, inputs.ok, None)
    if shard.model is not None:
        shard.model.copy_(shard.master)


@pytest.mark.parametrize("sharded", [False, True], ids=["replicated", "sharded"])
def test_a_new_optimizer_is_one_record(data_dir, tmp_path, monkeypatch, sharded):
    spec = registry.OptimizerSpec(
        replicated=lambda groups, o: torch.optim.SGD(groups, lr=o.lr),
        sharded=registry.ShardMath(False, shard_update.reference_sums, sgd_update),
        closed_division=False,
    )
    monkeypatch.setitem(registry.OPTIMIZERS, "sgd", spec)
    trainer = train_two_steps(
        data_dir,
        tmp_path,
        "optim.name=sgd",
        f"optim.sharded={sharded}",
        "submission.division=open",
        "optim.lr=0.1",
    )
    inner = trainer.optim.optimizer
    assert isinstance(inner, torch.optim.SGD) or inner.update_fn is sgd_update


# A new fused op, registered the way bert/model/fused.py registers its own: one FusedOp record
# naming the layer function it replaces and its benchmark. It is registered after the config,
# the trainer and the GPU harness were imported (ModelConfig declares its flag when the section
# is next used), in a fresh interpreter so that no other test sees it.
FUSED_PLUGIN = """
import sys
from pathlib import Path

import run_pretraining
from bert.config import describe_fields
from bert.core.benchmarks import KernelBench
from bert.model import fused
from bert.tools.common import set_args
from bert.tools.gpu.validate import microbenchmarks
from tiny_run import tiny_settings

calls = []


def counted_embedding(input_ids, table):
    calls.append(input_ids.numel())
    return table(input_ids)


fused.FUSED_OPS["fused_counted_embedding"] = fused.FusedOp(
    "embedding_backward", "test: a counted word-embedding lookup",
    {"word_embedding": counted_embedding}, bench=KernelBench("bench_counted"),
)

data_dir, out, flag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
settings = tiny_settings(data_dir, out, **{"run.max_steps": 2, flag: "true"})
code = run_pretraining.main(["--config", "configs/tiny_cpu.yaml", *set_args(settings)])
listed = any(line.startswith(flag + " (bool) = False  # test:") for line in describe_fields())
benched = ("bench_counted", ["--no-compile"], None) in microbenchmarks()
print("exit", code, "lookups", len(calls), "listed", listed, "benched", benched)
"""


def run_fused_plugin(tmp_path, flag: str):
    from tiny_run import make_tiny_data

    data_dir = make_tiny_data(tmp_path / "data")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    return subprocess.run(
        [sys.executable, "-c", FUSED_PLUGIN, str(data_dir), str(tmp_path / "out"), flag],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_new_fused_op_is_one_record(tmp_path):
    """The record alone, registered after the config was imported, gives
    model.fused_counted_embedding (config key, checks, --help-config), swaps the word-embedding
    lookup of the model the run trains, from the first step on, and puts its benchmark into the
    GPU window."""
    done = run_fused_plugin(tmp_path, "model.fused_counted_embedding")
    assert done.returncode == 0, done.stderr[-2000:]
    _, code, _, lookups, _, listed, _, benched = done.stdout.strip().splitlines()[-1].split()
    # exit 0: the 2 steps ran and the run stopped at its step budget, as told
    assert code == "0" and "run_stop aborted" in done.stderr + done.stdout
    assert int(lookups) >= 3  # 2 training steps and the eval, through the record's function
    assert listed == "True"  # --help-config lists the flag with the record's description
    assert benched == "True"  # the GPU window runs the benchmark the record names


def test_fused_flags_that_replace_the_same_function_are_refused(monkeypatch):
    """Two records replacing one layer function cannot both be on: neither would win silently."""
    from bert.core.errors import ConfigError
    from bert.model import fused
    from bert.model.config import ModelConfig

    record = dataclasses.replace(
        fused.FUSED_OPS["fused_mlm_loss"], replaces={"linear": torch.nn.functional.linear}
    )
    monkeypatch.setitem(fused.FUSED_OPS, "fused_mlm_loss", record)
    with pytest.raises(ConfigError, match="both replace the layer function 'linear'"):
        ModelConfig(fused_mlm_loss=True, fused_dense=True)
    ModelConfig(fused_mlm_loss=True)  # alone it is fine


def test_every_fused_record_replaces_known_layer_functions():
    from bert.model import fused
    from bert.model.config import sublayer_fusions
    from bert.model.layer_functions import REFERENCE, pick_layer_functions

    for flag, op in fused.FUSED_OPS.items():
        assert op.replaces and set(op.replaces) <= set(REFERENCE), flag
    with pytest.raises(KeyError, match="no layer function named"):
        pick_layer_functions({"lineaar": torch.nn.functional.linear})
    # model.compile_sublayers competes with the fusions inside the sublayers it compiles
    assert set(sublayer_fusions()) == {
        "fused_bias_dropout_residual_layernorm",
        "fused_dense",
        "fused_dense_gelu",
    }


def test_every_record_names_an_implementation_that_loads():
    """The records name their functions by dotted path (so the config reads them without
    torch): a misspelt path fails here, not when a run first turns the switch on."""
    from bert.core.lazy import load
    from bert.model import fused
    from bert.model.attention_backends import BACKENDS, resolve

    for flag, op in fused.FUSED_OPS.items():
        assert all(callable(load(fn)) for fn in op.replaces.values()), flag
    for name in BACKENDS:
        backend = resolve(name)
        assert callable(backend.attend) and callable(backend.attend_subset), name
    for name, spec in registry.OPTIMIZERS.items():
        refs = [spec.replicated] if spec.replicated else []
        if spec.sharded:
            refs += [spec.sharded.sums, spec.sharded.update, *(spec.sharded.fused or ())]
        assert all(callable(load(ref)) for ref in refs), name
    with pytest.raises(ValueError, match="expected 'package.module:function'"):
        load("bert.model.attention.no_colon")


def test_the_records_restate_the_kernels_facts_correctly():
    """fused.py and specs.py state the kernels' sizes and the LAMB op's name again, because
    importing the kernels package loads torch; they must agree with the kernels."""
    import kernels.lamb
    from bert.model import fused
    from bert.optim import specs
    from kernels.dense import FEATURE_MULTIPLE
    from kernels.reference import HIDDEN

    assert (fused.HIDDEN, fused.FEATURE_MULTIPLE) == (HIDDEN, FEATURE_MULTIPLE)
    assert specs.LAMB_OP == kernels.lamb.OP


@pytest.mark.parametrize(
    "key, registry, record",
    [
        ("data.balance", "data.order.strategies:STRATEGIES", strategies.STRATEGIES["none"]),
        ("model.attention", "bert.model.attention_backends:BACKENDS", None),
        ("optim.name", "bert.optim.specs:OPTIMIZERS", None),
    ],
)
def test_a_registry_name_is_stated_once(key, registry, record, monkeypatch):
    """A new entry, added after the config was imported, is accepted by its section, listed by
    --help-config and named by the error for an unknown name: all three read the registry."""
    from bert.config import describe_fields
    from bert.core.errors import ConfigError
    from bert.core.lazy import load

    table = load(registry)
    monkeypatch.setitem(table, "dummy", record or next(iter(table.values())))
    extra = ["submission.division=open"] if key == "optim.name" else []
    assert load_config(None, [f"{key}=dummy", *extra]) is not None
    listed = next(line for line in describe_fields() if line.startswith(f"{key} ("))
    assert "|dummy)" in listed
    with pytest.raises(ConfigError, match=rf"{key}='nosuch': expected one of .*, dummy$"):
        load_config(None, [f"{key}=nosuch"])


def test_a_curriculum_name_is_read_from_its_registry(monkeypatch):
    from bert.config import describe_fields
    from bert.core.errors import ConfigError
    from data.order import curricula

    monkeypatch.setattr(curricula, "CURRICULA", (*curricula.CURRICULA, "dummy"))
    assert load_config(None, ["data.curriculum.name=dummy", "submission.division=open"])
    assert any(
        line.startswith("data.curriculum.name (none|") and "|dummy)" in line
        for line in describe_fields()
    )
    with pytest.raises(ConfigError, match="expected one of none, .*, dummy$"):
        load_config(None, ["data.curriculum.name=nosuch"])


# Files that name every fused op although a new one need not join them: the GPU window's
# measured step times (a new kernel's test step runs on a default until a window measures it)
# and the order it runs the kernels' tests in (a new one's are found by their GPU marker).
LISTS_EVERY_OP_BY_CHOICE = {"bert/tools/gpu/expected.py", "bert/tools/gpu/window.py"}


def files_listing_every_fused_op(root: Path) -> set[str]:
    """The product files (outside tests/ and the docs) that name every fused op: its flag, its
    kernel's benchmark script or its kernel's test file. A list by hand a new op must join."""
    import re

    from bert.model.fused import FUSED_OPS

    names = [[flag, f"bench_{op.kernel}", f"test_{op.kernel}"] for flag, op in FUSED_OPS.items()]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py", "*.yaml"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = set()
    for name in listed:
        if name.startswith(("tests/", "benchmarks/")) or not (root / name).is_file():
            continue
        text = (root / name).read_text()
        if all(
            any(re.search(rf"(?<![A-Za-z0-9]){n}(?![A-Za-z0-9])", text) for n in op_names)
            for op_names in names
        ):
            found.add(name)
    return found


def test_the_files_a_new_fused_op_touches_are_the_documented_ones():
    """Besides its own files, a new fused op touches the records' file and the file its
    replacement functions live in (what the records name), and no list by hand: the count and
    the files are docs/architecture.md's "files touched" for a fused op."""
    import inspect
    import re

    from bert.model import fused

    root = Path(__file__).resolve().parents[2]
    named = {
        fn.split(":")[0].replace(".", "/") + ".py"
        for op in fused.FUSED_OPS.values()
        for fn in op.replaces.values()
    }
    record = Path(inspect.getsourcefile(fused)).relative_to(root).as_posix()
    lists = files_listing_every_fused_op(root) - LISTS_EVERY_OP_BY_CHOICE
    touched = {record, *named, *lists}
    row = next(
        line
        for line in (root / "docs" / "architecture.md").read_text().splitlines()
        if line.startswith("| a fused op |")
    )
    count, files = re.search(r"\+ (\d+): ([^;]*);", row).groups()
    assert set(re.findall(r"`([^`<>]+\.py)`", files)) == touched
    assert int(count) == len(touched) == 2
    # the check sees a list by hand: every op's flag named in one file
    assert "bert/model/fused.py" in files_listing_every_fused_op(root)
