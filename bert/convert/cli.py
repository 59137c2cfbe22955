#!/usr/bin/env python3
"""Convert BERT checkpoints to and from this project's format.

    tf PREFIX --out phase1.pt           the MLPerf phase-1 TF1 checkpoint (model.ckpt-28252);
                                        needs TensorFlow, imported only here
    nvidia FILE.pt --out phase1.pt      NVIDIA's converted phase-1 .pt (state dict under 'model')
    hf-import SRC --out phase1.pt       a HF save_pretrained folder, or an HF-named state dict file
    hf-export SRC --out DIR             our checkpoint -> a HF BertForPreTraining folder
                                        (loadable with from_pretrained); SRC: a training
                                        checkpoint folder (OUT/checkpoints/step_N, which every
                                        run leaves at its end) or its trainer.pt, or a .pt
                                        file; --state-dict-only writes DIR/pytorch_model.bin +
                                        config.json without transformers

The model shape comes from --bert-config (Google's bert_config.json), else --config (a project
YAML's model section), else the config.json beside the weights (hf-import: HF's; hf-export: a
training checkpoint's, the run's own config), else BERT-Large. Every import
is loaded into the model before saving, so a missing, extra or misshapen tensor is an error that
names it. Our format is {"model": state_dict}, which run.init_checkpoint reads. A correct
phase-1 conversion scores about 0.34085 MLM accuracy on the eval set before training
(REFERENCE 2). Exit status: 0 done, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bert.core.inputs import command_parser
from bert.core.errors import CheckpointError, ConfigError
from bert.core.files import check_output


# -- command line -----------------------------------------------------------------------------

HF_EXPORT_FILES = {
    "pytorch_model.bin",
    "model.safetensors",
    "config.json",
    "generation_config.json",
}  # what hf-export (or save_pretrained) writes


def check_out(args: argparse.Namespace) -> None:
    """--out is no input, and replaces an existing file, or a folder holding more than an
    earlier export, only with --force."""
    inputs = [p for p in (args.src, args.bert_config, args.config) if p]
    check_output(
        args.out,
        inputs,
        args.force,
        folder_ok=_export_file if args.command == "hf-export" else None,
    )


def _export_file(name: str) -> bool:
    """A file an earlier hf-export may have left: its outputs, or a hidden temp file."""
    return name in HF_EXPORT_FILES or name.startswith(".")


def run(args: argparse.Namespace) -> None:
    # here, not at the top: --help and argument errors answer without torch
    from bert.convert.formats import (
        model_config,
        read_hf_source,
        read_tf_checkpoint,
        read_torch_state,
        run_hf_export,
        save_ours,
    )
    from bert.model.weights import tf_to_hf_state_dict

    src, out = Path(args.src), Path(args.out)
    check_out(args)
    if args.command == "tf":
        cfg = model_config(args)
        state, _ = tf_to_hf_state_dict(read_tf_checkpoint(args.src), source=args.src)
        save_ours(state, cfg, out, source=args.src)
    elif args.command == "nvidia":  # the small config first: a bad one fails before GBs are read
        cfg = model_config(args)
        save_ours(read_torch_state(src, args.unsafe_load), cfg, out, str(src))
    elif args.command == "hf-import":
        cfg = model_config(args, src if src.is_dir() else None)
        save_ours(read_hf_source(src), cfg, out, str(src))
    else:
        run_hf_export(args, src, out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser(None, __doc__)
    parser.add_argument("command", choices=("tf", "nvidia", "hf-import", "hf-export"))
    parser.add_argument("src", help="checkpoint prefix (tf), file or folder")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --out file (hf-export: a folder of more)",
    )
    parser.add_argument("--bert-config", help="Google/HF bert_config.json for the model shape")
    parser.add_argument("--config", help="project YAML whose model section gives the shape")
    parser.add_argument(
        "--unsafe-load",
        action="store_true",
        help="nvidia: torch.load with weights_only=False (trusted files only)",
    )
    parser.add_argument(
        "--state-dict-only",
        action="store_true",
        help="hf-export: write pytorch_model.bin + config.json without transformers",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (CheckpointError, ConfigError, OSError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
