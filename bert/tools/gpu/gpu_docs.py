"""The GPU figures in README.md and kernels/VALIDATION.md, generated from the committed windows.

    python -m bert.tools.gpu.gpu_docs            # print every block
    python -m bert.tools.gpu.gpu_docs --write    # rewrite the blocks in both files
    python -m bert.tools.gpu.gpu_docs --check    # exit 1 naming each block that differs

A block is the text between `<!-- generated: NAME ... -->` and `<!-- end generated -->`; the
rest of each file is written by hand and never touched. tests/tools/test_gpu_docs.py checks that
both files equal what the records give, so a GPU number in them is always a recorded one.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from bert.core.files import write_text_atomic
from bert.tools.common import ROOT
from bert.tools.gpu import figures, perf_table, verdicts
from bert.tools.gpu.records import RECORDS, Window, windows

COMMAND = "python -m bert.tools.gpu.gpu_docs --write"
END = "<!-- end generated -->"
# an empty block (just written by hand) has no body line; `??` keeps a match inside one block
BLOCK = re.compile(
    r"<!-- generated: (?P<name>[\w-]+)[^>]*-->\n(?:(?P<body>.*?)\n)??" + re.escape(END), re.S
)
# file -> block name -> what renders it; a block in a file but not here is an error
BLOCKS: dict[str, dict[str, Callable[[list[Window]], str]]] = {
    "README.md": {"gpu-status": figures.status, "perf-table": perf_table.render},
    "kernels/VALIDATION.md": {
        "windows": verdicts.window_table,
        "kernel-verdicts": verdicts.kernel_verdicts,
        "switch-verdicts": verdicts.switch_verdicts,
        "lamb-bench": figures.lamb_bench,
        "fused-throughput": figures.fused_throughput,
        "train-compare": figures.train_compare,
    },
}


def opening(name: str) -> str:
    return f"<!-- generated: {name} by `{COMMAND}` from benchmarks/results/gpu; do not edit -->"


def rewrite(text: str, rendered: dict[str, str], where: str) -> str:
    """`text` with each block's body replaced by its rendering; every block must be there."""
    found = [m["name"] for m in BLOCK.finditer(text)]
    if sorted(found) != sorted(rendered):
        raise SystemExit(
            f"error: gpu_docs: {where} has blocks {found}, expected one each of {sorted(rendered)}"
        )
    return BLOCK.sub(lambda m: f"{opening(m['name'])}\n{rendered[m['name']]}\n{END}", text)


def stale(text: str, rendered: dict[str, str]) -> list[str]:
    """The names of the blocks whose body differs from the records' rendering, or that are
    missing from `text`."""
    bodies = {m["name"]: m["body"] for m in BLOCK.finditer(text)}
    return [name for name, body in rendered.items() if bodies.get(name) != body]


def render_all(found: list[Window]) -> dict[str, dict[str, str]]:
    return {doc: {name: fn(found) for name, fn in blocks.items()} for doc, blocks in BLOCKS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=Path, default=RECORDS, help="the windows' folder")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    rendered = render_all(windows(args.records))
    differs = []
    for doc, blocks in rendered.items():
        path = ROOT / doc
        if args.write:
            write_text_atomic(path, rewrite(path.read_text(), blocks, doc))
        elif args.check:
            differs += [f"{doc}: {name}" for name in stale(path.read_text(), blocks)]
        else:
            print("\n\n".join(f"{opening(n)}\n{body}\n{END}" for n, body in blocks.items()))
    for line in differs:
        print(f"stale: {line} (regenerate: {COMMAND})", file=sys.stderr)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
