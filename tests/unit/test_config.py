"""Config loading, overrides, validation and derived values."""

from __future__ import annotations

from pathlib import Path

import pytest

from bert.train.config import mlperf_eval_interval
from bert.config import (
    BatchGeometry,
    Config,
    ConfigError,
    describe_fields,
    load_config,
)
from bert.train.config import RunConfig

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert cfg.model.hidden_size % cfg.model.num_attention_heads == 0


def test_defaults_are_bert_large_mlperf_a100():
    """REFERENCE 1 and 3: BERT-Large, A100 v2.0 hyperparameters."""
    cfg = Config()
    assert (
        cfg.model.hidden_size,
        cfg.model.num_hidden_layers,
        cfg.model.num_attention_heads,
        cfg.model.intermediate_size,
    ) == (1024, 24, 16, 4096)
    assert cfg.model.padded_vocab_size == 30528
    assert (cfg.optim.lr, cfg.optim.beta1, cfg.optim.beta2) == (4.25e-4, 0.9, 0.999)
    assert cfg.schedule.total_steps == 6700 and cfg.run.global_batch_size == 448


def test_overrides_are_typed():
    cfg = load_config(
        None,
        [
            "optim.lr=1e-3",
            "log.quiet=true",
            "run.global_batch_size=64",
            "data.synthetic.num_shards=2",
            "model.attention=grouped_flash",
        ],
    )
    assert cfg.optim.lr == 1e-3 and isinstance(cfg.optim.lr, float)
    assert cfg.log.quiet is True and cfg.run.global_batch_size == 64
    assert cfg.data.synthetic.num_shards == 2 and cfg.model.attention == "grouped_flash"


@pytest.mark.parametrize(
    "override, message",
    [
        ("run.foo=1", "unknown config key 'run.foo'"),
        ("nosuch.key=1", "unknown config key 'nosuch'"),
        ("run.global_batch_size=abc", "run.global_batch_size='abc': expected an integer"),
        ("run.global_batch_size=1.5", "expected an integer"),
        ("log.quiet=maybe", "log.quiet='maybe': expected true or false"),
        ("run.precision=fp8", "run.precision='fp8'"),
        ("optim.beta1=1.0", "optim.beta1=1.0 must be in"),
        ("model.num_attention_heads=5", "not divisible by model.num_attention_heads=5"),
        ("schedule.warmup_steps=99999", "schedule.warmup_steps=99999"),
        ("run.global_batch_size", "expected section.key=value"),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(None, [override])


def test_bad_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("run:\n  global_batch_size: [1, 2]\n")
    with pytest.raises(ConfigError, match="run.global_batch_size"):
        load_config(path)
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_config(tmp_path / "missing.yaml")


def test_bert_config_json(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(
        '{"hidden_size": 256, "num_attention_heads": 4, "vocab_size": 30522,'
        ' "intermediate_size": 1024, "num_hidden_layers": 4}'
    )
    cfg = load_config(None, [f"model.bert_config_file={path}"])
    assert (cfg.model.hidden_size, cfg.model.num_hidden_layers) == (256, 4)


def test_mlperf_eval_interval():
    """REFERENCE 1: 150,000 samples for any global batch up to 2048."""
    assert all(mlperf_eval_interval(gbs) == 150_000 for gbs in (256, 448, 768, 1536, 2048))
    assert mlperf_eval_interval(4096) == 175_000  # floor(0.05*(230.23*4096+3e6)/25e3)*25e3


def test_batch_geometry_divisibility():
    geo = BatchGeometry.build(RunConfig(global_batch_size=448, gradient_accumulation_steps=2), 8)
    assert (geo.local_batch_size, geo.micro_batch_size) == (56, 28)
    with pytest.raises(ConfigError, match="not divisible by the world size 3"):
        BatchGeometry.build(RunConfig(global_batch_size=448), 3)
    with pytest.raises(ConfigError, match="gradient_accumulation_steps=3"):
        BatchGeometry.build(RunConfig(global_batch_size=448, gradient_accumulation_steps=3), 8)


def test_help_lists_every_key():
    lines = describe_fields()
    assert any(line.startswith("optim.lr (float)") for line in lines)
    assert any(line.startswith("data.synthetic.num_shards (int)") for line in lines)


def test_help_config_describes_every_key_and_lists_string_choices():
    lines = describe_fields()
    undescribed = [line for line in lines if "  # " not in line]
    assert not undescribed
    attention = next(line for line in lines if line.startswith("model.attention "))
    assert attention.startswith("model.attention (padded_sdpa|per_sequence|")
    assert any(line.startswith("optim.name (lamb|") for line in lines)
