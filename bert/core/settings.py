"""Config sections as frozen pydantic dataclasses: declared types, constraints and descriptions.

    @section("run")
    class RunConfig:
        global_batch_size: int = F(448, "samples per optimizer step over all ranks", gt=0)

`F(default, doc, **constraints)` declares a field: its default (or `factory=`), the one-line
description `--help-config` prints, and pydantic's constraints (gt, ge, lt, le). `section(name)`
makes the class a frozen pydantic dataclass that forbids unknown fields and non-finite numbers,
and turns every validation failure into a `ConfigError` whose message names `name.key`, the
value and what is expected, in the wording the bad-input tests pin ("run.max_steps=-1 must be
>= 0", "run.precision='fp8': expected fp32 or bf16 or fp16"). A section's `__post_init__` holds
the rules that span fields; it runs after the declared checks, on a frozen object.

A string field that names a registry entry (an attention backend, a balancing strategy, an
optimizer, ...) is declared `RegistryName(lambda: REGISTRY)`: the section's check, the error for
an unknown name and `--help-config`'s list of names all read the registry, when they run, so a
new entry needs no edit anywhere else.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import reprlib
from typing import Annotated, Any, Callable, Iterable, Literal, get_args, get_origin

import annotated_types
import pydantic
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from bert.core.errors import ConfigError

SECTION_CONFIG = ConfigDict(
    extra="forbid",
    frozen=True,
    allow_inf_nan=False,
    coerce_numbers_to_str=True,
    validate_default=False,
)
MAX_SHOWN = 200  # characters of a value an error line shows (a YAML alias bomb stays short)


# A path as given, with ~ expanded once, here: everything downstream reads it as it is. The
# default too (validate_default): "~/.cache/..." read as is would be a folder named "~" in the
# current one.
def _expanded_path(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if "\x00" in value:  # every file call would fail on it ("embedded null byte")
        raise ValueError("a path cannot hold a NUL character")
    return os.path.expanduser(value)


ExpandedPath = Annotated[str, BeforeValidator(_expanded_path), Field(validate_default=True)]


@dataclasses.dataclass(frozen=True)
class Choices:
    """The names a registry field accepts: `registry()` read at each use (validation, help), so
    an entry added after the section was declared is accepted and listed too; `why` follows the
    list in the error (what a name that is not there would need)."""

    registry: Callable[[], Iterable[str]]
    why: str = ""

    def names(self) -> tuple[str, ...]:
        return tuple(self.registry())

    def check(self, value: str) -> str:
        if value not in self.names():
            raise ValueError(f"expected one of {', '.join(self.names())}{self.why}")
        return value


def RegistryName(registry: Callable[[], Iterable[str]], why: str = "") -> Any:
    """The type of a string field whose value must be a name of `registry()`."""
    choices = Choices(registry, why)
    return Annotated[str, AfterValidator(choices.check), choices]


def choices_of(info: FieldInfo) -> Choices | None:
    """The Choices a field declares (its type a RegistryName), or None."""
    return next((m for m in info.metadata if isinstance(m, Choices)), None)


def F(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    factory: Callable | None = None,
    **constraints: Any,
) -> Any:
    """A field: its default (or `factory`), its description and its constraints."""
    if factory is not None:
        return Field(default_factory=factory, description=doc, **constraints)
    return Field(default, description=doc, **constraints)


def section(name: str):
    """Class decorator: a frozen, validated config section named `name` (e.g. "data.synthetic").
    A class may define `prepare(kwargs) -> kwargs`, applied to the given values first, and
    `declare_fields()`, which declares the fields its registry added since (`fields_of`)."""

    def wrap(cls: type) -> type:
        dc = pydantic.dataclasses.dataclass(cls, config=SECTION_CONFIG)
        validate = dc.__init__

        @functools.wraps(validate)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            fields_of(dc)
            if hasattr(dc, "prepare"):
                kwargs = dc.prepare(kwargs)
            try:
                validate(self, *args, **kwargs)
            except ValidationError as err:
                raise ConfigError(message(name, dc, err)) from None

        dc.__init__ = __init__
        dc.section_name = name
        return dc

    return wrap


def fields_of(cls: type) -> dict[str, FieldInfo]:
    """A section's fields as of now: a section whose fields follow a registry (ModelConfig's
    fused flags, one per record of bert/model/fused.py) declares the ones added since first."""
    declare = getattr(cls, "declare_fields", None)
    if declare is not None:
        declare()
    return cls.__pydantic_fields__


def rebuild(cls: type) -> None:
    """Rebuild a section's validation after it declared new fields (`declare_fields`), keeping
    its ConfigError wording: pydantic's rebuild puts its own __init__ back."""
    wrapped = cls.__init__
    pydantic.dataclasses.rebuild_dataclass(cls, force=True)
    cls.__init__ = wrapped


# Bounded at every level, so a value of billions of shared items (a YAML alias bomb) is shown
# in microseconds: repr() would expand it all first.
_SHORT_REPR = reprlib.Repr()  # keyword arguments need Python 3.12
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxtuple = _SHORT_REPR.maxlist = _SHORT_REPR.maxdict = _SHORT_REPR.maxset = 6
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = MAX_SHOWN


def shown(value: Any) -> str:
    """`value`'s repr in at most MAX_SHOWN characters (and as long to compute)."""
    try:
        text = _SHORT_REPR.repr(value)
    except ValueError:  # an int beyond Python's 4,300-digit conversion limit
        text = f"<{type(value).__name__} too long to show>"
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def message(prefix: str, cls: type, err: ValidationError) -> str:
    """The first validation error as one line: `prefix.key=value` and what is wrong."""
    error = err.errors(include_url=False)[0]
    if error["type"] in ("value_error", "assertion_error"):  # a __post_init__ rule's own error
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, ConfigError):
            return str(cause)
        if isinstance(cause, ValueError) and error["loc"]:  # a field validator's own words
            key = ".".join([prefix, *map(str, error["loc"])]).lstrip(".")
            return f"{key}={shown(error.get('input'))}: {cause}"
    owner, field_name, path = owning_field(cls, error["loc"])
    key = ".".join([prefix, *path]) if prefix else ".".join(path)
    value = error.get("input")
    kind = error["type"]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        known = ", ".join(f.name for f in dataclasses.fields(owner))
        return f"unknown config key {key!r} (known: {known})"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{key}={shown(value)} must be {bounds(owner, field_name)}"
    if kind == "finite_number":
        return f"{key}={shown(value)} must be a finite number"
    if kind == "string_too_short":
        return f"{key}={shown(value)} must not be empty"
    info = owner.__pydantic_fields__[field_name] if field_name else None
    choices = choices_of(info) if info else None
    if choices is not None:
        return f"{key}={shown(value)}: expected one of {', '.join(choices.names())}"
    return f"{key}={shown(value)}: expected {expected(info.annotation if info else None)}"


def owning_field(cls: type, loc: tuple) -> tuple[type, str | None, list[str]]:
    """The section class that declares the field at `loc`, the field's name and its dotted
    path (a union's member tag or a list index after the field is not part of the key)."""
    path = []
    for part in loc:
        info = getattr(cls, "__pydantic_fields__", {}).get(str(part))
        if info is None:
            break
        path.append(str(part))
        if not dataclasses.is_dataclass(info.annotation):
            return cls, str(part), path
        cls = info.annotation
    return cls, None, path or [str(p) for p in loc]


def bounds(cls: type, name: str) -> str:
    """A field's declared range as text: "> 0", ">= 0", "in [0, 1)"."""
    low = high = None
    for item in cls.__pydantic_fields__[name].metadata:
        if isinstance(item, (annotated_types.Gt, annotated_types.Ge)):
            low = ("(", item.gt) if isinstance(item, annotated_types.Gt) else ("[", item.ge)
        elif isinstance(item, (annotated_types.Lt, annotated_types.Le)):
            high = (")", item.lt) if isinstance(item, annotated_types.Lt) else ("]", item.le)
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"{'>' if low[0] == '(' else '>='} {low[1]}"
    return f"{'<' if high[0] == ')' else '<='} {high[1]}"


def expected(typ: Any) -> str:
    """How an error names what a type accepts."""
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if typ in names:
        return names[typ]
    if get_origin(typ) is Literal:
        return " or ".join(str(a) for a in get_args(typ))
    if get_origin(typ) is Annotated:
        return expected(get_args(typ)[0])
    args = get_args(typ)
    if args and get_origin(typ) is not list:
        return " or ".join(expected(a) for a in args)
    if get_origin(typ) is list:
        return "a list"
    if dataclasses.is_dataclass(typ):
        return "a mapping of its keys"
    return str(typ)
