"""Which --out folders a resumable prepare step may write into: its own, and empty ones.

The folder steps (examples, to-varlen, reshard, all) resume into their --out: a file already
there under an output's name counts as done and is skipped. So a folder holding someone else's
files would silently become part of the output. Before anything is read or written, a step
checks its --out (`check_out`):
- missing or empty: fine;
- marked (MARK_NAME, written when the step finishes: the step and the settings that decide its
  files): fine when the mark is this step's with these settings, else refused;
- not marked (a run of the step that did not finish, or someone else's folder): fine only when
  every entry is a name this step writes (`own`) or a hidden temporary, else refused.
--force takes the folder as is. The mark is written by `mark_out` once the step is done, so a
refused or failed step leaves nothing behind that it did not already write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from bert.core.errors import ConfigError
from bert.core.files import write_text_atomic
from bert.core.readers import read_json_if_any

MARK_NAME = ".open-bert-prepare.json"
MARK_FORMAT = "open-bert-prepare"


def read_mark(folder: Path) -> dict | None:
    mark = read_json_if_any(folder / MARK_NAME)
    return mark if mark is not None and mark.get("format") == MARK_FORMAT else None


def _wanted(step: str, settings: dict) -> dict:
    return {"format": MARK_FORMAT, "step": step, "settings": _plain(settings)}


def check_out(
    out: str | os.PathLike,
    step: str,
    settings: dict,
    own: Callable[[str], bool],
    force: bool = False,
) -> None:
    """Refuse (ConfigError) an --out holding files that are not this step's (module doc)."""
    folder = Path(out)
    if force or not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"--out {out}: is a file; name a folder")
    mark, wanted = read_mark(folder), _wanted(step, settings)
    if mark is not None:
        if mark != wanted:
            raise ConfigError(
                f"--out {out}: was written by `{mark.get('step')}` with other "
                f"settings ({_first_difference(mark, wanted)}); "
                f"name another folder, or pass --force to use it as is"
            )
        return
    foreign = sorted(
        p.name for p in folder.iterdir() if not p.name.startswith(".") and not own(p.name)
    )
    if foreign:
        raise ConfigError(
            f"--out {out}: holds files this step does not write "
            f"({', '.join(foreign[:3])}); a resumed step takes files under its "
            f"outputs' names as done: name a new or empty folder, or pass --force "
            f"to use it as is"
        )


def mark_out(out: str | os.PathLike, step: str, settings: dict) -> None:
    """The step finished: mark --out as its folder, with these settings."""
    write_text_atomic(Path(out) / MARK_NAME, json.dumps(_wanted(step, settings), indent=1) + "\n")


def _plain(settings: dict) -> dict:
    """JSON's view of the settings (paths as strings, tuples as lists), as the mark holds it."""
    return json.loads(json.dumps(settings, default=str))


def _first_difference(saved: dict, wanted: dict) -> str:
    if saved.get("step") != wanted["step"]:
        return f"that step was {saved.get('step')}, this is {wanted['step']}"
    old, new = saved.get("settings") or {}, wanted["settings"]
    key = next((k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)), "?")
    shorten = lambda v: s if len(s := str(v)) <= 80 else s[:77] + "..."
    return f"{key}: {shorten(old.get(key))} there, {shorten(new.get(key))} now"
