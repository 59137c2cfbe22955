"""The run record, run.json: what a result needs beside it to be understood and repeated.

    config    every key: its resolved value and where it came from ("default", "file",
              "--set", or "flag" for the command-line flags that set a key, e.g. --quiet)
    versions  python, torch (and its CUDA, cuDNN), numpy, h5py, mlperf-logging, this package
    code      an installed copy's version and the commit stamped into it when built (setup.py),
              else the git commit (and whether the tree had changes)
    device    the training device, host, ranks; command: the command line; metrics: how the
              metrics record measures what it reports (bert/obs/metrics.py)
    result    how the run ended (added when the run ends)

`format_config` is the same resolved config as YAML with each key's source as a comment
(run_pretraining.py --print-config); the YAML loads back as a config file.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bert.build_info import stamped_commit
from bert.core.readers import read_yaml
from bert.config import MOVED_KEYS, Config, find_config, flatten, parse_override
from bert.train.own_files import WRITER

if TYPE_CHECKING:
    import torch

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("numpy", "h5py", "mlperf-logging", "tensorboard", "open-bert-mlperf")


@dataclass
class RunOrigin:
    """How the config was given: the file, the --set overrides, the overrides that flags made
    (--quiet, --resume, ...), and the command line."""

    config_file: str | None = None
    set_overrides: list[str] = field(default_factory=list)
    flag_overrides: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))

    @classmethod
    def from_args(cls, args, argv: list[str] | None) -> "RunOrigin":
        """From run_pretraining.py's parsed arguments; each flag that sets a key, as the
        override it stands for."""
        flags = ["log.quiet=true"] if args.quiet else []
        if args.record_samples:
            flags.append(f"log.record_samples_dir={args.record_samples}")
        if args.resume:
            flags.append(f"checkpoint.resume={args.resume}")
        if args.eval_only:
            flags.append("run.eval_only=true")
        command = list(sys.argv) if argv is None else [sys.argv[0], *argv]
        return cls(args.config, list(args.set), flags, command)

    @property
    def overrides(self) -> list[str]:
        """For the loader, in order: --set first, then the flags (which win)."""
        return [*self.set_overrides, *self.flag_overrides]


def _new_key(key: str) -> str:
    return MOVED_KEYS.get(key, key)


def config_sources(cfg: Config, origin: RunOrigin | None) -> dict[str, str]:
    """Dotted key -> "default", "file", "--set" or "flag" (the last one given wins)."""
    sources = {key: "default" for key in flatten(cfg.to_dict())}
    if origin is None:
        return {key: "given" for key in sources}  # a Config built in code, not by the loader
    if origin.config_file:
        # the file load_config read, by the same reader (the file may have changed since)
        tree = read_yaml(find_config(origin.config_file), "config file") or {}
        for key in flatten(tree):
            sources[_new_key(key)] = "file"
    for label, overrides in (("--set", origin.set_overrides), ("flag", origin.flag_overrides)):
        for item in overrides:
            sources[_new_key(parse_override(item)[0])] = label
    return sources


def format_config(cfg: Config, sources: dict[str, str]) -> str:
    """The resolved config as YAML, each key's source as a comment."""
    lines: list[str] = []
    _format_section(cfg.to_dict(), "", 0, sources, lines)
    return "\n".join(lines) + "\n"


def _format_section(
    tree: dict, prefix: str, depth: int, sources: dict[str, str], lines: list[str]
) -> None:
    indent = "  " * depth
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            _format_section(value, f"{prefix}{key}.", depth + 1, sources, lines)
            continue
        scalar = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        scalar = scalar.removesuffix("...").strip()
        lines.append(f"{indent}{key}: {scalar}  # {sources.get(prefix + key, 'default')}")


def versions() -> dict[str, Any]:
    import torch  # here, not at the top: --print-config formats a config without torch

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def code_version() -> dict[str, Any]:
    """The commit an installed copy was built from (setup.py's stamp) with its version, else
    the git commit of the checkout this code runs from, else the installed version alone."""
    stamped = stamped_commit()
    if stamped:  # an installed copy: a git folder around site-packages would not be its code's
        return {"git_commit": stamped, "package_version": versions()["open-bert-mlperf"]}
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain"))  # new files count; ignored ones do not
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "package_version": versions()["open-bert-mlperf"]}


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.strip()


def device_facts(device: torch.device, world_size: int) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "device": str(device),
        "world_size": world_size,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            compute_capability=f"{props.major}.{props.minor}",
            gpus_visible=torch.cuda.device_count(),
        )
    return facts


def build_record(
    cfg: Config,
    origin: RunOrigin | None,
    device: torch.device,
    world_size: int,
    metrics: dict[str, Any],
    files: dict[str, str],
) -> dict:
    sources = config_sources(cfg, origin)
    values = flatten(cfg.to_dict())
    return {
        "format": 1,
        "written_by": WRITER,  # how a later run knows this file for its own (own_files.py)
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": origin.argv if origin else None,
        "cwd": os.getcwd(),
        # the file a bare shipped-config name stands for (bert.config.find_config)
        "config_file": (
            str(find_config(origin.config_file)) if origin and origin.config_file else None
        ),
        "config": {key: {"value": values[key], "source": sources[key]} for key in values},
        "versions": versions(),
        "code": code_version(),
        "device": device_facts(device, world_size),
        "metrics": metrics,
        "files": files,
    }
