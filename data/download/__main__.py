"""open-bert-download [OUT] [--metadata URL ...] [--all]: fetch the MLCommons BERT inputs
through the MLC R2 metadata, verify every file against the published MD5s, unpack the text.

Files land in OUT/download/<dataset>/ (OUT defaults to /data/bert): the text, MLPerf's
vocab.txt (the vocabulary open-bert-prepare needs) and the phase-1 checkpoint. Large files
print their progress with rate and ETA. When done it prints the next commands. A rerun skips what is
complete and verified and resumes a partial download (NAME.part). Exit status: 0 done, 2 a
file, URL or server that cannot be used (one `error:` line; good files are kept).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bert.core.errors import install_hint
from bert.core.inputs import check_output_path, command_parser, float_arg, int_arg
from data.download import published
from data.download.datasets import download_dataset
from data.download.errors import DownloadError
from data.download.fetch import MAX_RETRIES, MAX_WAIT_S, Transfer
from data.download.metadata import dataset_name


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("open-bert-download", __doc__)
    parser.add_argument(
        "out",
        nargs="?",
        default="/data/bert",
        help="data root; downloads go to OUT/download/ (default %(default)s)",
    )
    parser.add_argument(
        "--metadata",
        action="append",
        metavar="URL",
        help="an MLC R2 NAME.uri URL, repeatable (default: the two official "
        f"BERT ones under {published.METADATA_ROOT})",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every file the metadata lists (default: the ones data prep and "
        "checkpoint conversion need; --all adds the 17 GB Wikipedia "
        "dump, the TF1 .meta, the TF2 checkpoint and results_text.zip)",
    )
    defaults = Transfer()
    parser.add_argument(
        "--retries",
        type=int_arg(0, MAX_RETRIES),
        default=defaults.retries,
        help="extra attempts per file after a lost connection, resumed (default %(default)s)",
    )
    parser.add_argument(
        "--retry-wait",
        type=float_arg(0.0, inclusive=True, high=MAX_WAIT_S),
        default=defaults.retry_wait,
        help="seconds before the first retry, doubled for each next one (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float_arg(0.0, high=MAX_WAIT_S),
        default=defaults.timeout,
        help="seconds without data before a connection counts as lost (default %(default)s)",
    )
    args = parser.parse_args(argv)
    args.metadata = args.metadata or list(published.DEFAULT_METADATA)
    return args


def next_steps(out: Path, folders: dict[str, Path]) -> str:
    """The commands that turn the downloads into training inputs."""
    inputs, text = folders.get(published.INPUT_FILES), folders.get(published.TEXT_DATASET)
    if inputs is None or text is None:
        return ""
    q = shlex.quote
    results, ckpt = text / published.TEXT_DIR, inputs / published.TF1_PREFIX
    return "\n".join(
        [
            "next:",
            f"  open-bert-prepare all --train-text {q(str(results))} \\",
            f"      --eval-text {q(str(results / 'eval.txt'))} --vocab "
            f"{q(str(inputs / 'vocab.txt'))} \\",
            f"      --out {q(str(out))} --num-shards 4320 --workers $(nproc)",
            f"  {install_hint('tf')}   # only for the one-time checkpoint conversion",
            f"  open-bert-convert tf {q(str(ckpt))} \\",
            f"      --bert-config {q(str(inputs / 'bert_config.json'))} \\",
            f"      --out {q(str(out / 'phase1' / 'model.ckpt-28252.pt'))}",
        ]
    )


def run(args: argparse.Namespace) -> None:
    # OUT and every URL checked before the first byte is fetched
    check_output_path(args.out, "OUT", DownloadError, folder=True)
    for url in args.metadata:
        dataset_name(url)
    transfer = Transfer(args.timeout, args.retries, args.retry_wait)  # checks them, as argparse did
    out = Path(args.out)
    folders = {
        dataset_name(url): download_dataset(url, out / "download", args.all, transfer)
        for url in args.metadata
    }
    print(f"done: {len(folders)} dataset(s) verified under {out / 'download'}")
    steps = next_steps(out, folders)
    if steps:
        print(steps)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (DownloadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
