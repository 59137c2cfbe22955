"""Every file a user hands the program is read here: YAML, JSON and PyTorch pickles.

    tree = read_yaml(path, "config file")                       # ConfigError on any failure
    manifest = read_json(folder / "manifest.json", "checkpoint manifest", CheckpointError)
    mark = read_json_if_any(folder / "mark.json")               # None: absent or unreadable
    record = parse_json(line, f"{path}: line {n}", LogError)    # one record of a .jsonl or log
    state = read_torch(folder / "trainer.pt", "training state", CheckpointError)
    require_keys(state, ("model", "optimizer"), path, "training state", CheckpointError)

Each reader turns every way the file can fail (missing, unreadable, a folder, not UTF-8, not
YAML/JSON/a pickle, truncated, the wrong shape at the top) into the one bad-input error the
caller names (`error`, a bert.core.errors class), with the file and what was expected, in one
line. Every YAML and JSON file is read by bert/core/inputs.read_regular: a regular file of at
most MAX_INPUT_BYTES, never a device or a FIFO. A YAML file's aliases may not expand beyond
MAX_YAML_VALUES values (a few KB of nested aliases can stand for billions: the "billion
laughs"), and a cycle of aliases is refused. Keys and numbers mean what YAML 1.2 says or are
refused, with the key and line, where YAML 1.1 (what PyYAML implements) would silently differ:
a key given twice in one mapping (PyYAML keeps the last; 1.2 forbids it), an integer with a
leading zero (1.1 octal: 010 is 8; 1.2: 10) and a sexagesimal number (1.1 base 60: 1:30 is 90;
1.2: a string). An integer longer than bert/core/inputs.MAX_INT_DIGITS is refused before it is
converted. (1.1's yes/no/on/off booleans are left to the typed fields that read them.)

JSON is read the same way, whole files (`read_json`) and one record of a line-per-record file
alike (`parse_json`: an MLPerf log line, a metrics record): a key given twice in one object is
refused with the key (Python's json keeps the last one silently, so a hand-edited manifest or
a forged log record could say two things, and each reader would believe a different one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import yaml

from bert.core.errors import BadInputError, ConfigError
from bert.core.inputs import (
    MAX_INPUT_BYTES,
    MAX_INT_DIGITS,
    check_path,
    read_regular,
    shown_text,
)

MAX_YAML_VALUES = 100_000  # expanded nodes of a config: real ones have a few hundred
MAX_SHOWN_ERROR = 160  # characters of a library's own error message kept in ours


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= MAX_SHOWN_ERROR else text[:MAX_SHOWN_ERROR] + "..."


def read_text(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    max_bytes: int = MAX_INPUT_BYTES,
) -> str:
    data = read_regular(path, what, error, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {str(path)!r}: not UTF-8 text (byte {err.start})") from None


class _AliasBomb(Exception):
    pass


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Values `node` stands for once every alias is expanded (shared nodes counted each time
    they are used). Raises _AliasBomb beyond MAX_YAML_VALUES or on a cycle."""
    key = id(node)
    if key in memo:
        if memo[key] < 0:
            raise _AliasBomb("an alias refers to a value that contains it")
        return memo[key]
    memo[key] = -1  # in progress: meeting it again is a cycle
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    size = 1
    for child in children:
        size += _expanded_size(child, memo)
        if size > MAX_YAML_VALUES:
            raise _AliasBomb(f"its aliases expand to more than {MAX_YAML_VALUES:,} values")
    memo[key] = size
    return size


class _YamlRefused(Exception):
    pass


_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


def _scalar_problem(node: yaml.ScalarNode) -> str | None:
    """Why a YAML 1.1 number `node` is refused, or None. Only implicit (plain) numbers: a quoted
    "010" is the string it looks like."""
    if node.tag not in (_INT_TAG, _FLOAT_TAG) or node.style is not None:
        return None
    text = node.value.replace("_", "").lstrip("+-")
    if ":" in text:
        return "a YAML 1.1 base-60 number (1:30 is 90 there); quote it or write the number"
    if node.tag == _INT_TAG:
        if len(text) > 1 and text[0] == "0" and text[1:2].isdigit():
            return "a YAML 1.1 octal integer (010 is 8 there); write it without the leading 0"
        if len(text) > MAX_INT_DIGITS:
            return f"an integer of more than {MAX_INT_DIGITS} digits"
    return None


def _check_node(node: yaml.Node, key: str, seen: set[int]) -> None:
    """Refuse (_YamlRefused, naming `key` and the line) a key given twice in a mapping and a
    YAML 1.1-only number, anywhere under `node`; each node once (aliases share them)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        problem = _scalar_problem(node)
        if problem:
            raise _YamlRefused(
                f"{key or 'value'}={shown_text(node.value)} at line {line}: {problem}"
            )
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_node(item, f"{key}[{index}]", seen)
    elif isinstance(node, yaml.MappingNode):
        _check_mapping(node, key, seen)


def _check_mapping(node: yaml.MappingNode, key: str, seen: set[int]) -> None:
    names: dict[str, int] = {}
    for key_node, value_node in node.value:
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        full = f"{key}.{name}" if key and name is not None else (name or key)
        if name is not None and name != "<<":  # "<<" merges; a merged key may be overridden
            where = key_node.start_mark.line + 1
            if name in names:
                raise _YamlRefused(
                    f"key {full!r} given twice (lines {names[name]} and {where}); "
                    "YAML keeps only the last"
                )
            names[name] = where
        _check_node(key_node, full, seen)
        _check_node(value_node, full, seen)


class _BoundedLoader(yaml.SafeLoader):
    """yaml.safe_load's loader that measures and checks the document before building it."""

    def construct_document(self, node: yaml.Node) -> Any:
        _expanded_size(node, {})
        _check_node(node, "", set())
        return super().construct_document(node)


def read_yaml(path: str | os.PathLike, what: str, error: type[BadInputError] = ConfigError) -> Any:
    """The YAML document in `path` (None when it is empty)."""
    text = read_text(path, what, error)
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:  # its message spans lines: the problem and where, on one
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise error(f"{what} {str(path)!r}: invalid YAML ({problem}{where})") from None
    except (_AliasBomb, _YamlRefused) as err:
        raise error(f"{what} {str(path)!r}: refused: {err}") from None
    except RecursionError:
        raise error(f"{what} {str(path)!r}: nested too deeply") from None
    except ValueError as err:  # a value the constructor refuses (an integer of 5,000 digits)
        raise error(f"{what} {str(path)!r}: {_short(err)}") from None


class _KeyTwice(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise _KeyTwice(key)
        found[key] = value
    return found


def parse_json(text: str, where: str, error: type[BadInputError] = ConfigError) -> Any:
    """The JSON value `text` holds; `error` starting with `where` (the file, and the line for a
    record of a line-per-record file) when it is no JSON, nests beyond Python's recursion
    limit, or gives a key twice in one object."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _KeyTwice as err:
        raise error(
            f"{where}: key {shown_text(str(err.args[0]))} given twice in one object "
            "(JSON readers would keep only the last)"
        ) from None
    except (json.JSONDecodeError, RecursionError, ValueError) as err:
        raise error(f"{where}: not valid JSON ({_short(err)})") from None


def read_json(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    expect: type = dict,
) -> Any:
    """The JSON value in `path`, which must be an `expect` (an object by default)."""
    value = parse_json(read_text(path, what, error), f"{what} {str(path)!r}", error)
    if not isinstance(value, expect):
        raise error(
            f"{what} {str(path)!r}: expected a JSON {_json_name(expect)}, got "
            f"{_json_name(type(value))}"
        )
    return value


def read_json_if_any(path: str | os.PathLike) -> dict | None:
    """The JSON object in `path`, or None where there is none to read (missing, not a regular
    file, too large, not JSON, not an object): a mark that a folder may or may not hold, read
    like every input file, so a FIFO or a device under its name cannot block the reader."""
    try:
        return read_json(path, "JSON object")
    except BadInputError:
        return None


def _json_name(typ: type) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        int: "number",
        float: "number",
        bool: "true/false",
        type(None): "null",
    }
    return names.get(typ, typ.__name__)


def read_torch(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    mmap: bool = False,
    expect: type = dict,
) -> Any:
    """A torch.save file (ours: pickles of dicts of tensors), loaded on the CPU."""
    import torch

    check_path(path, what, error)
    if not Path(path).is_file():
        read_regular(path, what, error)  # the reason, in the readers' words
    try:
        value = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - unpickling raises anything; all mean "damaged"
        raise error(
            f"{what} {str(path)!r}: cannot read ({type(err).__name__}: {_short(err)})"
        ) from None
    if not isinstance(value, expect):
        raise error(
            f"{what} {str(path)!r}: expected a {expect.__name__}, got {type(value).__name__}"
        )
    return value


def require_keys(
    mapping: dict,
    keys: Iterable[str],
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    types: dict[str, type | tuple] | None = None,
) -> None:
    """`error` naming the first of `keys` missing from `mapping` (or of the wrong type)."""
    for key in keys:
        if key not in mapping:
            raise error(
                f"{what} {str(path)!r}: no {key!r} (has: {', '.join(map(str, list(mapping)[:12]))})"
            )
        want = (types or {}).get(key)
        if want is not None and (
            not isinstance(mapping[key], want)
            or isinstance(mapping[key], bool)
            and bool not in _tuple(want)
        ):
            raise error(f"{what} {str(path)!r}: {key!r} is a {type(mapping[key]).__name__}")


def _tuple(want: type | tuple) -> tuple:
    return want if isinstance(want, tuple) else (want,)
