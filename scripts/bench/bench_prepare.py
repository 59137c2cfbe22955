#!/usr/bin/env python3
"""Data prep speed: the reference algorithm against `prepare_data.py examples`, side by side.

    python scripts/bench/bench_prepare.py [--text FILE ...] [--vocab vocab.txt] [--out JSON]

Both sides run in this one process, one core each, on the same text and vocabulary:

    reference   the reference's tokenizer run its way (tests/tokenization_oracle.py: one
                character at a time through `unicodedata`, the FullTokenizer of Google's BERT),
                then instance creation and the fixed-length HDF5 writer
    project     data.prepare.create_examples.create_examples_file: what one worker of
                `prepare_data.py examples` does for one text shard

The instance and writing code is the project's on both sides (the reference's is the same
algorithm; its own Python lists and TFRecords are not timed here), so the ratio is the
tokenizer's and reader's. The outputs must be identical: the script compares every dataset.

Without --text it uses a stand-in for Wikipedia that every Python install has (the docstrings
of the standard library and pydoc's topics, one sentence per line); without --vocab it trains
a WordPiece vocabulary on that text with `tokenizers`. The projection for the full MLPerf data
scales the measured seconds per instance to its 156.7M sequences (REFERENCE 2).
"""
from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import json
import os
import platform
import random
import re
import shlex
import sys
import sysconfig
import tempfile
import time
import unicodedata
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from data.prepare import bert_text  # noqa: E402
from data.prepare.create_examples import ShardJob, create_examples_file  # noqa: E402
from data.prepare.fixed import write_fixed  # noqa: E402
from data.prepare.instances import ExampleParams, create_instances  # noqa: E402
from data.prepare.wordpiece import SPECIAL_TOKENS, load_tokenizer  # noqa: E402
from scripts.script_utils import cpu_model, git_commit  # noqa: E402
import tokenization_oracle as oracle  # noqa: E402

MLPERF_SEQUENCES = 156_700_000  # training sequences of the full data set (REFERENCE 2)
MACHINE_CORES = 16
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def stand_in_text(folder: Path) -> Path:
    """Python's own English prose as text shard format: a document per docstring or topic."""
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if {"test", "tests", "site-packages", "idlelib", "lib2to3"} & set(path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 200:
                    texts.append(doc)
    lines = []
    for text in texts:
        for paragraph in text.split("\n\n"):
            lines += SENTENCE_END.split(" ".join(paragraph.split()))
        lines.append("")
    out = folder / "part-00000-of-00001"
    out.write_text("\n".join(line for line in lines) + "\n", encoding="utf-8")
    return out


def train_vocab(text: Path, folder: Path) -> Path:
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    lines = [line for line in text.read_text(encoding="utf-8").splitlines() if line]
    tokenizer.train_from_iterator(lines, vocab_size=30522, special_tokens=list(SPECIAL_TOKENS),
                                  show_progress=False)
    tokenizer.save_model(str(folder))
    return folder / "vocab.txt"


def run_reference(text: Path, vocab_file: Path, out: Path, params: ExampleParams) -> dict:
    """The reference tokenizer, its way; then the common instance and writing code."""
    start = time.perf_counter()
    tokenizer = oracle.Tokenizer(oracle.load_vocab(vocab_file.read_bytes()))
    docs = oracle.documents(text.read_bytes(), tokenizer)
    documents = [[np.asarray(s, dtype=np.int32) for s in doc] for doc in docs]
    tokenized = time.perf_counter()
    ids = tokenizer.vocab
    _, vocab = load_tokenizer(vocab_file)  # the Vocab record only (ids of [CLS], [SEP], ...)
    assert vocab.cls_id == ids["[CLS]"] and vocab.size == len(ids)
    instances = create_instances(documents, params, vocab, random.Random(params.random_seed))
    write_fixed(out, instances, params.max_seq_length, params.max_predictions)
    done = time.perf_counter()
    return {"tokenize_s": tokenized - start, "instances_and_write_s": done - tokenized,
            "total_s": done - start, "instances": len(instances)}, docs


def run_project(text: Path, vocab_file: Path, out: Path, params: ExampleParams) -> dict:
    """One worker's job of `prepare_data.py examples`, from a cold start of its tables."""
    bert_text.tables.cache_clear()
    start = time.perf_counter()
    _, count, _ = create_examples_file(ShardJob(text, out, vocab_file, params))
    return {"total_s": time.perf_counter() - start, "instances": count}


def project_tokenize_s(text: Path, vocab_file: Path) -> tuple[float, list]:
    from data.prepare.wordpiece import read_documents

    bert_text.tables.cache_clear()
    start = time.perf_counter()
    tokenizer, _ = load_tokenizer(vocab_file)
    docs = read_documents(text, tokenizer)
    return time.perf_counter() - start, [[s.tolist() for s in doc] for doc in docs]


def same_datasets(a: Path, b: Path) -> bool:
    with h5py.File(a) as fa, h5py.File(b) as fb:
        return sorted(fa) == sorted(fb) and all(np.array_equal(fa[k][:], fb[k][:]) for k in fa)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measure(text: Path, vocab_file: Path, params: ExampleParams, work: Path) -> dict:
    reference, ref_docs = run_reference(text, vocab_file, work / "reference.hdf5", params)
    project = run_project(text, vocab_file, work / "project.hdf5", params)
    project["tokenize_s"], docs = project_tokenize_s(text, vocab_file)
    project["instances_and_write_s"] = project["total_s"] - project["tokenize_s"]
    sentences = sum(map(len, ref_docs))
    for side in (reference, project):
        side["tokenize_sentences_per_s"] = sentences / side["tokenize_s"]
        side["seconds_per_instance"] = side["total_s"] / side["instances"]
        side["projected_full_mlperf_hours_16_cores"] = (
            MLPERF_SEQUENCES * side["seconds_per_instance"] / MACHINE_CORES / 3600)
    identical = docs == ref_docs and same_datasets(work / "reference.hdf5", work / "project.hdf5")
    return {
        "sentences": sentences, "documents": len(ref_docs),
        "tokens": int(sum(len(s) for d in ref_docs for s in d)),
        "identical_output": identical, "reference": reference, "project": project,
        "ratio_tokenize": reference["tokenize_s"] / project["tokenize_s"],
        "ratio_end_to_end": reference["total_s"] / project["total_s"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", type=Path, nargs="+", help="text shards (default: the stand-in)")
    p.add_argument("--vocab", type=Path, help="vocab.txt (default: trained on the text)")
    p.add_argument("--dupe-factor", type=int, default=ExampleParams().dupe_factor)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "prepare.json")
    args = p.parse_args(argv)
    params = ExampleParams(dupe_factor=args.dupe_factor)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        texts = args.text or [stand_in_text(work)]
        vocab_file = args.vocab or train_vocab(texts[0], work)
        runs = [{"text": str(t) if args.text else "stand-in (pydoc topics + stdlib docstrings)",
                 "text_bytes": t.stat().st_size, "text_sha256": sha256(t),
                 **measure(t, vocab_file, params, work)} for t in texts]
        vocab_lines = vocab_file.read_bytes().count(b"\n")
        vocab_sha = sha256(vocab_file)
    record = {
        "benchmark": "bench_prepare",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"cpu ({cpu_model() or 'unknown model'}), "
                   f"{os.cpu_count()} cores",
        "commit": git_commit(),
        "command": shlex.join([sys.executable, *sys.argv]),
        "python": platform.python_version(), "unicodedata": unicodedata.unidata_version,
        "vocab": {"path": str(args.vocab) if args.vocab else "trained on the text",
                  "lines": vocab_lines, "sha256": vocab_sha},
        "params": vars(params), "cores_per_side": 1,
        "projection": f"full MLPerf data ({MLPERF_SEQUENCES} sequences, REFERENCE 2) at the "
                      f"measured seconds per instance, on {MACHINE_CORES} cores",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for run in runs:
        print(f"{run['text']}: {run['sentences']} sentences, identical={run['identical_output']}")
        for side in ("reference", "project"):
            r = run[side]
            print(f"  {side:9s} tokenize {r['tokenize_sentences_per_s']:9.0f} sentences/s, "
                  f"end to end {r['total_s']:7.2f} s for {r['instances']} instances; full "
                  f"MLPerf on {MACHINE_CORES} cores: "
                  f"{r['projected_full_mlperf_hours_16_cores']:.2f} h")
        print(f"  ratio: tokenize {run['ratio_tokenize']:.1f}x, end to end "
              f"{run['ratio_end_to_end']:.1f}x")
    print(f"wrote {args.out}")
    return 0 if all(r["identical_output"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
