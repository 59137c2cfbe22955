"""The one input rule for every command: what a number, a path and an input file may be.

    count = parse_int("1e3", "run.max_steps")                    # 1000
    rate = parse_float(text, "--tflops", low=0.0)                # finite, > 0
    p.add_argument("--timeout", type=float_arg(low=0.0))         # argparse names the option
    parser = Parser(prog="open-bert-plan")                       # no NUL in any argument
    data = read_regular(path, "config file", ConfigError)        # bytes, bounded, never blocks
    check_regular(log, "log", LogError)                          # stat only: an input named
    check_output_path(out, "--out", folder=True)                 # before anything is written

Every command's argument and config parsing goes through these (bert/config.py, the readers in
bert/core/readers.py, the planner, the downloader, the data and checkpoint tools), so a bad
value is one bad-input error (`error:` line, exit status 2) whichever command met it:

- a number's text is bounded BEFORE conversion: at most MAX_NUMBER_CHARS characters and a
  decimal exponent of at most MAX_INT_DIGITS, so `1e999999999` or 5,000 digits cannot hang
  (Decimal to int) or escape as Python's own "Exceeds the limit" ValueError;
- a float is finite unless the caller says otherwise, and its sign is checked where it has one;
- a path holds no NUL character (every file call fails on it: "embedded null byte");
- an input file (a config, a manifest) is a regular file of at most MAX_INPUT_BYTES, checked on
  the open descriptor before a byte is read: /dev/zero would be read forever and a FIFO would
  block the open itself past SIGTERM; an input read by a library that opens it itself (a log,
  a checkpoint) is judged the same way by its stat before the library sees it;
- an output path is of the kind the command writes (a folder, or a file) where it exists, and
  otherwise lies under a folder the user may write in (a path under a file, or under a folder
  without write permission, is refused before anything starts rather than after half a run).
"""

from __future__ import annotations

import argparse
import decimal
import math
import os
import stat
import sys
from pathlib import Path
from typing import Callable

from bert.core.errors import BadInputError, ConfigError

MAX_NUMBER_CHARS = 64  # a number's text: the longest real value (a 64-bit seed) has 20 digits
MAX_INT_DIGITS = 30  # an integer's decimal digits, exponent included: 10**30 is beyond any count
MAX_INPUT_BYTES = 16 * 2**20  # a config or manifest file: real ones are a few KB
SHOWN_CHARS = 40  # characters of a refused value an error quotes


def shown_text(text: str) -> str:
    """`text`'s repr, cut to SHOWN_CHARS: a 5,000-digit value stays one short line."""
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...")


def check_path(path: str | os.PathLike, what: str, error: type[BadInputError] = ConfigError):
    """`error` when `path` holds a NUL character; else `path`."""
    if "\x00" in os.fspath(path):
        raise error(f"{what} {shown_text(str(path))}: a path cannot hold a NUL character")
    return path


def _bounded(text: str, what: str, kind: str, error: type[BadInputError]) -> str:
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise error(
            f"{what}={shown_text(text)}: expected {kind} of at most {MAX_NUMBER_CHARS} characters"
        )
    return text


def parse_int(text: str, what: str, error: type[BadInputError] = ConfigError) -> int:
    """The integer `text` writes ("12", "1e3", "2.0", "1_000"), exactly (no float rounding);
    its size is checked on the Decimal's exponent before int() expands it."""
    text = _bounded(text, what, "an integer", error)
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise error(f"{what}={shown_text(text)}: expected an integer") from None
    if not number.is_finite():
        raise error(f"{what}={shown_text(text)}: expected an integer")
    if number and number.adjusted() >= MAX_INT_DIGITS:
        raise error(
            f"{what}={shown_text(text)}: expected an integer of at most {MAX_INT_DIGITS} digits"
        )
    if number != number.to_integral_value():
        raise error(f"{what}={shown_text(text)}: expected an integer")
    return int(number)


def parse_float(text: str, what: str, error: type[BadInputError] = ConfigError, **bounds) -> float:
    """The number `text` writes, held to `check_float`'s keyword `bounds` (finite unless
    `finite=False`, above `low` or at it when `inclusive`, at most `high`)."""
    text = _bounded(text, what, "a number", error)
    try:
        value = float(text)
    except ValueError:
        raise error(f"{what}={shown_text(text)}: expected a number") from None
    return check_float(value, what, error, **bounds)


def check_float(
    value: float,
    what: str,
    error: type[BadInputError] = ConfigError,
    *,
    low: float | None = None,
    inclusive: bool = False,
    finite: bool = True,
    high: float | None = None,
) -> float:
    """`value` itself, or `error` when it is NaN, infinite (unless `finite=False`), not above
    `low` or above `high`: a planner or a timeout given inf or NaN would print or wait on
    nonsense, and a sleep or socket timeout beyond C's range raises OverflowError."""
    if math.isnan(value) or finite and math.isinf(value):
        raise error(f"{what}={value}: must be a finite number")
    if low is not None and (value < low or value == low and not inclusive):
        raise error(f"{what}={value}: must be {'>=' if inclusive else '>'} {low:g}")
    if high is not None and value > high:
        raise error(f"{what}={value}: must be <= {high:g}")
    return value


# -- command lines ------------------------------------------------------------------------------


class _ArgError(BadInputError):
    pass


def _argparse_error(err: _ArgError) -> Exception:
    """Text that is no number at all: a ValueError, so argparse words it as for type=int
    ("invalid int value: 'eight'"); a number out of bounds: our words."""
    if str(err).endswith(("expected an integer", "expected a number")):
        return ValueError(str(err))
    return argparse.ArgumentTypeError(str(err))


# argparse's own line names the option ("argument --gpus: value='x': expected an integer")
def int_arg(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse `type=` for a bounded integer (in [`low`, `high`] where given)."""

    def convert(text: str) -> int:
        try:
            value = parse_int(text, "value", _ArgError)
        except _ArgError as err:
            raise _argparse_error(err) from None
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"value={value}: must be >= {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"value={value}: must be <= {high}")
        return value

    convert.__name__ = "int"
    return convert


def float_arg(
    low: float | None = None, inclusive: bool = False, high: float | None = None
) -> Callable[[str], float]:
    """An argparse `type=` for a finite float (above `low`, or at it when `inclusive`; at most
    `high`)."""

    def convert(text: str) -> float:
        try:
            return parse_float(text, "value", _ArgError, low=low, inclusive=inclusive, high=high)
        except _ArgError as err:
            raise _argparse_error(err) from None

    convert.__name__ = "float"
    return convert


class Parser(argparse.ArgumentParser):
    """Every command's argument parser: an argument holding a NUL character (possible through
    main(argv), a wrapper or a response file, never through a shell) is refused before any option
    is read, since each path option would otherwise fail deep inside a file call; so is
    `--option=--`, which argparse turns into an empty list. Long refused values are cut, so the
    `error:` line stays one short line."""

    def parse_known_args(self, args=None, namespace=None):
        for arg in args if args is not None else sys.argv[1:]:
            if isinstance(arg, str) and "\x00" in arg:
                self.error(f"argument {shown_text(arg)}: cannot hold a NUL character")
            # argparse drops a "--" given as `--option=--` and hands the option an empty list
            if isinstance(arg, str) and arg.startswith("-") and arg.endswith("=--"):
                self.error(f"argument {shown_text(arg)}: '--' is not a value")
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        """One `PROG: error:` line and status 2: the usage argparse prints first would be a
        second line, which the bad-input promise rules out (--help shows it)."""
        if len(message) > 400:
            message = message[:300] + " [...] " + message[-80:]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def command_parser(prog: str | None, doc: str, **options) -> Parser:
    """A command's Parser whose --help prints `doc` (its module docstring) with the line breaks
    it was written with; `options` go to argparse (an epilog, say)."""
    return Parser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **options
    )


# -- input files --------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    max_bytes: int = MAX_INPUT_BYTES,
) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes`. Opened without blocking (a FIFO
    with no writer would hang the open) and judged on the open descriptor, so what is checked is
    what is read; a file grown past the cap while read is refused too."""
    check_path(path, what, error)
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise error(f"{what} {name!r}: is a folder, not a file") from None
    except OSError as err:
        raise error(f"{what} {name!r}: {err.strerror or type(err).__name__}") from None
    try:
        _check_regular(os.fstat(fd).st_mode, os.fstat(fd).st_size, what, name, error, max_bytes)
        data = _read_at_most(fd, max_bytes + 1)
    except OSError as err:
        raise error(f"{what} {name!r}: {err.strerror or type(err).__name__}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise error(f"{what} {name!r}: more than {max_bytes:,} bytes")
    return data


def _check_regular(
    mode: int, size: int, what: str, name: str, error: type[BadInputError], max_bytes: int
) -> None:
    if stat.S_ISDIR(mode):
        raise error(f"{what} {name!r}: is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise error(f"{what} {name!r}: is {_kind(mode)}, not a regular file")
    if size > max_bytes:
        raise error(f"{what} {name!r}: {size:,} bytes, more than {max_bytes:,}")


def check_regular(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    max_bytes: int | None = None,
) -> None:
    """`error` unless `path` (through its symlinks) is a regular file, of at most `max_bytes`
    when given; judged by its stat, without opening it (a FIFO's open would block), for an
    input a library then opens itself."""
    check_path(path, what, error)
    try:
        found = os.stat(path)
    except OSError as err:  # missing, a symlink loop, a path through a file
        raise error(f"{what} {str(path)!r}: {err.strerror or type(err).__name__}") from None
    limit = sys.maxsize if max_bytes is None else max_bytes
    _check_regular(found.st_mode, found.st_size, what, str(path), error, limit)


def check_output_path(
    path: str | os.PathLike,
    what: str,
    error: type[BadInputError] = ConfigError,
    *,
    folder: bool,
) -> None:
    """Before anything is written: `error` when `path` (a folder when `folder`, else a file)
    holds a NUL, exists as the other kind (or, for a file, as a symlink: what it points to is
    not ours to replace), or lies where this user cannot create it (its nearest existing parent
    is a file, or a folder without write permission)."""
    check_path(path, what, error)
    target = Path(os.path.abspath(path))
    if os.path.lexists(target):
        if not folder and target.is_symlink():  # writing would replace what it points to
            raise error(f"{what} {str(path)!r}: is a symlink; name the file itself")
        if target.is_dir() != folder:
            kind = "a folder" if folder else "a file"
            raise error(f"{what} {str(path)!r}: exists and is not {kind}")
        where = target if folder else target.parent
    else:
        where = next(p for p in target.parents if os.path.lexists(p))
        if not where.is_dir():
            raise error(f"{what} {str(path)!r}: {where} is not a folder")
    if not os.access(where, os.W_OK | os.X_OK):  # root passes; its refusals come at the write
        raise error(f"{what} {str(path)!r}: cannot write in {where} (permission denied)")


def _read_at_most(fd: int, limit: int) -> bytes:
    parts, total = [], 0
    while total < limit:
        part = os.read(fd, min(limit - total, 1 << 20))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)
