"""Pins every config key and command-line flag, so options do not sprawl (torchtitan's
test_no_new_cli_options is the model).

A new key or flag is a decision: when this test fails, add it here on purpose, with its
default in the section's dataclass, a comment there saying what it does, and the docs.
"""

from __future__ import annotations

import pytest

from bert.config import MOVED_KEYS, describe_fields, load_config
from bert.model.fused import FUSED_OPS
from bert.train.cli import build_parser

KEYS = {
    "model": [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
        "pad_vocab_to_multiple_of",
        "attention",
        "last_layer_subset",
        # one model.<flag> per fused op: the record is the decision (bert/model/fused.py)
        *FUSED_OPS,
        "compile_sublayers",
        "fp8_linear",
        "fp8_scaling",
        "bert_config_file",
    ],
    "data": [
        "train_dir",
        "eval_file",
        "max_seq_length",
        "max_predictions_per_seq",
        "balance",
        "ranks_per_node",
        "prefetch_depth",
    ],
    "data.synthetic": [
        "enabled",
        "num_shards",
        "samples_per_shard",
        "eval_samples",
        "seed",
        "cache_dir",
    ],
    "data.curriculum": [
        "name",
        "bucket_boundaries",
        "round_batches",
        "loss_targets",
        "loss_window",
        "max_batches",
        "eta",
        "gamma",
        "alpha",
        "reward",
    ],
    "optim": [
        "name",
        "lr",
        "beta1",
        "beta2",
        "eps",
        "weight_decay",
        "max_grad_norm",
        "sharded",
        "clip_mode",
        "bucket_cap_mb",
        "fused_kernel",
    ],
    "schedule": ["total_steps", "warmup_steps", "start_warmup_step", "power"],
    "run": [
        "global_batch_size",
        "gradient_accumulation_steps",
        "max_steps",
        "max_samples",
        "seed",
        "precision",
        "device",
        "threads",
        "cache_cleared",
        "init_checkpoint",
        "output_dir",
        "eval_only",
        "max_nonfinite_steps",
        "cuda_graphs",
        "graph_token_bucket",
        "graph_masked_bucket",
        "graph_max_shapes",
    ],
    "eval": ["target_mlm_accuracy", "interval_samples", "samples", "batch_size"],
    "checkpoint": ["interval_steps", "final", "keep", "resume"],
    "log": ["interval_s", "quiet", "record_samples_dir", "tensorboard", "all_ranks"],
    "dist": ["timeout_s"],
    "submission": ["org", "platform", "division", "status"],
    "profile": ["start_step", "steps", "dir", "memory_snapshot", "nvtx"],
}
CLI_FLAGS = [
    "--config",
    "--eval-only",
    "--force",
    "--help",
    "--help-config",
    "--print-config",
    "--quiet",
    "--record-samples",
    "--resume",
    "--set",
]


def test_no_new_config_keys():
    keys = [line.split(" ")[0] for line in describe_fields()]
    expected = [f"{section}.{key}" for section, names in KEYS.items() for key in names]
    assert sorted(keys) == sorted(expected)
    assert len(keys) == 97 + len(FUSED_OPS)  # the newest: checkpoint.final


def test_moved_keys_still_load_into_their_new_place():
    """An old key sets the new one, with a warning that names both."""
    assert set(MOVED_KEYS.values()) <= {line.split(" ")[0] for line in describe_fields()}
    examples = {
        "data.curriculum.name": "random",
        "data.curriculum.bucket_boundaries": "256,512",
        "data.curriculum.alpha": "1/t",
        "data.curriculum.reward": "visit_gain",
        "data.curriculum.loss_targets": "3.0",
        "submission.division": "open",
        "log.quiet": "true",
        "checkpoint.resume": "auto",
        "log.record_samples_dir": "x",
        "eval.target_mlm_accuracy": "0.5",
        "data.curriculum.gamma": "0.5",
    }
    base = ["submission.division=open", "data.curriculum.name=shuffled"]
    for old, new in MOVED_KEYS.items():
        value = examples.get(new, "7")
        with pytest.warns(FutureWarning, match=f"config key {old} is now {new}"):
            moved = load_config(None, [*base, f"{old}={value}"])
        assert moved == load_config(None, [*base, f"{new}={value}"]), old


def test_no_new_cli_flags():
    flags = sorted(
        flag
        for action in build_parser()._actions
        for flag in action.option_strings
        if flag.startswith("--")
    )
    assert flags == CLI_FLAGS
