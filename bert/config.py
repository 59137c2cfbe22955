"""The run's root config: each component's own typed section, loaded from YAML and overrides.

    model       bert/model/config.py    ModelConfig
    data        data/config.py          DataConfig (+ synthetic, curriculum)
    optim       bert/optim/config.py    OptimConfig
    schedule    bert/optim/config.py    ScheduleConfig
    run         bert/train/config.py    RunConfig
    eval, checkpoint, log, dist, submission   bert/train/config.py
    profile     bert/obs/config.py      ProfileConfig

A run's config is a YAML file with these sections plus `--set section.key=value` overrides. Each
section is a frozen pydantic dataclass (bert/core/settings.py) that declares its fields' types,
ranges and descriptions; the loader reads integers exactly and "a,b,c" lists from text, builds
each section, and the section validates itself (declared constraints, then `__post_init__`'s
rules across its fields); cross-section rules are `Config.__post_init__`'s. Unknown keys and bad
values raise `ConfigError` naming the key and value, in one line. Keys that moved
(`MOVED_KEYS`) are still read, with a warning naming the new key.
`run_pretraining.py --help-config` lists every key with its type and default, and the value
--config (tiny_cpu unless given) sets where it differs (`describe_config`).

A config given by a bare name (`tiny_cpu` or `tiny_cpu.yaml`, no folder) that is not a file in
the current folder is one of the shipped configs (`shipped_configs()`): configs/ of a checkout,
the same files inside an installed wheel.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from bert.model.config import ModelConfig
from bert.model.fused import enabled
from bert.optim.config import OptimConfig, ScheduleConfig
from bert.optim.specs import OPTIMIZERS
from bert.train.config import (
    CheckpointConfig,
    DistConfig,
    EvalConfig,
    LogConfig,
    RunConfig,
    SubmissionConfig,
    run_device_type,
)
from bert.train.graphs.config import graphs_config_error
from bert.core.errors import ConfigError, check
from bert.core.inputs import parse_float, parse_int
from bert.core.readers import read_yaml
from bert.core.settings import F, choices_of, expected, fields_of, section, shown
from bert.obs.config import ProfileConfig
from data.config import BatchGeometry, DataConfig
from data.order.curricula import division_error

__all__ = [
    "BatchGeometry",
    "Config",
    "ConfigError",
    "MOVED_KEYS",
    "describe_config",
    "describe_fields",
    "find_config",
    "load_config",
    "parse_override",
    "shipped_configs",
]
PACKAGE_DIR = Path(__file__).resolve().parent


@section("")
class Config:
    model: ModelConfig = F(factory=ModelConfig)
    data: DataConfig = F(factory=DataConfig)
    optim: OptimConfig = F(factory=OptimConfig)
    schedule: ScheduleConfig = F(factory=ScheduleConfig)
    run: RunConfig = F(factory=RunConfig)
    eval: EvalConfig = F(factory=EvalConfig)
    checkpoint: CheckpointConfig = F(factory=CheckpointConfig)
    log: LogConfig = F(factory=LogConfig)
    dist: DistConfig = F(factory=DistConfig)
    submission: SubmissionConfig = F(factory=SubmissionConfig)
    profile: ProfileConfig = F(factory=ProfileConfig)

    def __post_init__(self) -> None:
        division = self.submission.division
        check(
            OPTIMIZERS[self.optim.name].closed_division or division == "open",
            f"optim.name={self.optim.name!r}: the closed division requires LAMB "
            f"(REFERENCE 1); set submission.division=open",
        )
        problem = division_error(self.data.curriculum.name, division)
        check(problem is None, problem or "")
        check(
            self.data.max_seq_length <= self.model.max_position_embeddings,
            f"data.max_seq_length={self.data.max_seq_length} exceeds "
            f"model.max_position_embeddings={self.model.max_position_embeddings}",
        )
        problem = device_combination_error(self.model, self.run)
        check(problem is None, problem or "")
        problem = graphs_config_error(self)
        check(problem is None, problem or "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def device_combination_error(model: ModelConfig, run: RunConfig) -> str | None:
    """Attention backend, fused kernels, device and precision that cannot run together: found
    here, before anything is written, rather than at the first step (a log already open)."""
    device, precision = run_device_type(run.device), run.precision
    where = f"run.device={run.device}" + (
        f" (resolves to {device})" if run.device == "auto" else ""
    )
    if model.attention == "per_sequence" and device == "cuda":
        return (
            f"model.attention=per_sequence is the CPU path (it reads sequence lengths on "
            f"the host) and {where}: use flash_varlen or padded_sdpa on CUDA"
        )
    if model.attention == "flash_varlen" and (device != "cuda" or precision == "fp32"):
        return (
            f"model.attention=flash_varlen needs CUDA and run.precision=bf16 or fp16, got "
            f"{where} and run.precision={precision}: use padded_sdpa (or per_sequence "
            f"on CPU)"
        )
    fused = enabled(model) + (["fp8_linear"] if model.fp8_linear else [])
    if fused and device == "cuda" and precision == "fp32":
        return (
            f"model.{fused[0]}=true needs run.precision=bf16 or fp16 on CUDA (its kernel "
            f"takes 16-bit activations), got run.precision=fp32 with {where}"
        )
    return None


# Keys that moved to the section of their concern: old -> new. Still read (with a warning).
MOVED_KEYS = {
    "run.target_mlm_accuracy": "eval.target_mlm_accuracy",
    "run.eval_interval_samples": "eval.interval_samples",
    "run.eval_samples": "eval.samples",
    "run.eval_batch_size": "eval.batch_size",
    "run.checkpoint_interval_steps": "checkpoint.interval_steps",
    "run.checkpoint_keep": "checkpoint.keep",
    "run.resume": "checkpoint.resume",
    "run.log_interval_s": "log.interval_s",
    "run.quiet": "log.quiet",
    "run.record_samples_dir": "log.record_samples_dir",
    "run.submission_org": "submission.org",
    "run.submission_platform": "submission.platform",
    "run.submission_division": "submission.division",
    "run.submission_status": "submission.status",
    "data.curriculum": "data.curriculum.name",
    "data.bucket_boundaries": "data.curriculum.bucket_boundaries",
    **{
        f"data.curriculum_{k}": f"data.curriculum.{k}"
        for k in (
            "round_batches",
            "loss_targets",
            "loss_window",
            "max_batches",
            "eta",
            "gamma",
            "alpha",
            "reward",
        )
    },
}


# ---------------------------------------------------------------------------------------------
# Reading YAML and command-line values: numbers and lists as their fields declare them; then
# each section (bert/core/settings.py) validates its types, ranges and rules


def _number(value: Any, typ: type, key: str) -> Any:
    """An int or float field's value from YAML or `--set` text: integers exactly (no detour
    through a float that would round a large seed), never from a bool, a mapping or a list.
    Text goes through the one number rule (bert/core/inputs.py): bounded before conversion."""
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise ConfigError(f"{key}={shown(value)}: expected {expected(typ)}")
    if not isinstance(value, str):
        return value
    if typ is float:
        return parse_float(value, key)
    return parse_int(value, key)


def _list(value: Any, item: type, key: str) -> list:
    """A YAML list, or "a,b,c" from the command line (an empty string: an empty list)."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = [value]
    try:
        return [_number(p, item, key) for p in parts]
    except ConfigError:
        what = "integers such as 128,256,384,512" if item is int else "numbers"
        raise ConfigError(f"{key}={shown(value)}: expected comma-separated {what}") from None


def _prepared(value: Any, typ: Any, key: str) -> Any:
    if typ in (int, float):
        return _number(value, typ, key)
    if get_origin(typ) is list:
        return _list(value, get_args(typ)[0], key)
    if typ is bool and isinstance(value, str) and value.lower() in ("1", "0", "yes", "no"):
        return value.lower() in ("1", "yes")
    return value


def _build(cls: type, values: Any, prefix: str) -> Any:
    """The section `cls` from a mapping of its keys (nested sections built first)."""
    if values is None:  # a section left empty in the YAML
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(
            f"{prefix.rstrip('.') or 'config'}: expected a mapping of its keys, got {shown(values)}"
        )
    fields = fields_of(cls)
    kwargs = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(f"unknown config key {full!r} (known: {', '.join(fields)})")
        typ = fields[key].annotation
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value, f"{full}.")
        else:
            kwargs[key] = _prepared(value, typ, full)
    return cls(**kwargs)


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of every leaf of a config tree (a YAML file, Config.to_dict()); a
    mapping is a section, not a leaf: {"optim": {"lr": 0.01}} -> {"optim.lr": 0.01}."""
    leaves: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            leaves.update(flatten(value, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def _new_key(key: str) -> str:
    if key not in MOVED_KEYS:
        return key
    warnings.warn(f"config key {key} is now {MOVED_KEYS[key]}", FutureWarning, stacklevel=4)
    return MOVED_KEYS[key]


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        if node.get(part) is None:  # a new section, or one left empty in the YAML
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {part!r} is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    return key.strip(), value.strip()


def _read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    tree = read_yaml(path, "config file") or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {str(path)!r}: top level must be a mapping")
    return tree


def shipped_configs() -> Path:
    """The folder of the configs that ship with the program: bert/configs/ in an installed wheel
    (setup.py maps the checkout's configs/ there), else configs/ beside the package (a checkout,
    an editable install)."""
    installed = PACKAGE_DIR / "configs"
    return installed if installed.is_dir() else PACKAGE_DIR.parent / "configs"


def shipped_names() -> list[str]:
    """The names --config takes for the shipped configs (tiny_cpu, ...), sorted."""
    return sorted(p.stem for p in shipped_configs().glob("*.yaml"))


def find_config(name: str | os.PathLike) -> Path:
    """`name` itself when it exists or names a folder; else the shipped config of that bare
    name (with or without .yaml). A bare name that is neither is a ConfigError."""
    path = Path(name)
    if path.exists() or len(path.parts) != 1:
        return path
    folder = shipped_configs()
    for candidate in (folder / path.name, folder / f"{path.name}.yaml"):
        if candidate.is_file():
            return candidate
    shipped = ", ".join(shipped_names()) or "none found"
    raise ConfigError(
        f"config {str(name)!r}: no such file here, and no shipped config of "
        f"that name (shipped: {shipped})"
    )


def load_config(
    path: str | os.PathLike | None = None, overrides: typing.Sequence[str] = ()
) -> Config:
    """Read a YAML config (or the defaults when `path` is None; a bare name may be a shipped
    config: find_config) and apply `key=value` overrides."""
    tree: dict[str, Any] = {}
    for key, value in flatten(_read_yaml(find_config(path)) if path is not None else {}).items():
        _set_dotted(tree, _new_key(key), value)
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(tree, _new_key(key), value)
    return _build(Config, tree, "")


def _type_name(typ: Any) -> str:
    if get_origin(typ) is Literal:
        return "|".join(str(a) for a in get_args(typ))
    if get_origin(typ) is Annotated:
        return _type_name(get_args(typ)[0])
    if get_origin(typ) in (typing.Union, types.UnionType):
        return "|".join(_type_name(a) for a in get_args(typ))
    if get_origin(typ) is list:
        return f"list[{get_args(typ)[0].__name__}]"
    return typ.__name__


def describe_fields(cls: type = Config, prefix: str = "", values: Any = None) -> list[str]:
    """`section.key (type) = default  # description` lines for --help-config; with `values`
    (a config, or its section), `= default -> value` where its value differs."""
    lines = []
    fields = fields_of(cls)
    # a section's defaults as it builds them; the root, all sections, is never built: its
    # checks would resolve run.device=auto, which imports torch to look for a GPU
    leaves = any(not dataclasses.is_dataclass(f.annotation) for f in fields.values())
    defaults = cls() if leaves else None
    for name, info in fields.items():
        typ = info.annotation
        value = getattr(values, name) if values is not None else None
        if dataclasses.is_dataclass(typ):
            lines += describe_fields(typ, f"{prefix}{name}.", value)
            continue
        key = f"{prefix}{name}"
        default = getattr(defaults, name)
        choices = choices_of(info)  # a registry's names as it holds them now
        kind = "|".join(choices.names()) if choices else _type_name(typ)
        line = f"{key} ({kind}) = {default!r}"
        if values is not None and value != default:
            line += f" -> {value!r}"
        lines.append(f"{line}  # {info.description}" if info.description else line)
    return lines


def describe_config(name: str | os.PathLike, cfg: Config) -> list[str]:
    """--help-config: every key with its default and, where `cfg` (read from --config `name`)
    differs, its value; then the shipped configs --config takes by name."""
    return [
        f"# section.key (type) = default -> the value in {str(name)!r} where it differs",
        *describe_fields(values=cfg),
        f"# shipped configs (--config NAME): {', '.join(shipped_names()) or 'none found'}",
    ]
