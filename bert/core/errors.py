"""The bad-input error family: every class here means "the user gave something this program
cannot use", which run_pretraining.py and the scripts turn into one `error:` line and exit
status 2. Each message names the file, key or value at fault."""

from __future__ import annotations


MAX_MESSAGE = 500  # characters: one line a terminal shows, whatever the user typed into it
PACKAGE = "open-bert-mlperf"  # pyproject's name: what `pip install` takes, with an extra


def install_hint(extra: str) -> str:
    """The pip line that installs the project's `extra` (pyproject's optional-dependencies):
    what an error about a missing optional package tells the user to run. Naming the extra,
    not the bare package, installs the version range the project was tested with."""
    return f"pip install '{PACKAGE}[{extra}]'"


class BadInputError(ValueError):
    """Bad user input (config, data, checkpoint, log): one `error:` line, exit status 2.

    The message is made one line and at most MAX_MESSAGE characters here, whatever value a
    rule quoted into it: its start (the key and value) and end (what is expected) are kept."""

    def __init__(self, message: object = "") -> None:
        text = " ".join(str(message).split())
        if len(text) > MAX_MESSAGE:
            text = f"{text[: MAX_MESSAGE * 3 // 5]} [...] {text[-MAX_MESSAGE // 3 :]}"
        super().__init__(text)


class ConfigError(BadInputError):
    """A configuration key or value that cannot be used; the message names it."""


class DataError(BadInputError):
    """A data file (shard, eval file, text, vocabulary) that cannot be read as promised."""


class CheckpointError(BadInputError):
    """A checkpoint (init weights, a training checkpoint to resume) that cannot be used."""


class DamagedCheckpoint(CheckpointError):
    """A training checkpoint whose files cannot be read as written (truncated, overwritten, a
    key missing): `--resume auto` falls back to an older one
    (bert/train/checkpoint/resume_point.py)."""


class JobError(RuntimeError):
    """The job cannot go on for a reason outside this rank (a peer stalled or died, training
    diverged): one `error:` line naming the rank and the step, exit status 1."""


class PeerLost(JobError):
    """A rank stalled or died: the job's collectives cannot complete, nor can this process
    shut its process group down; it reports and exits at once."""


def check(cond: bool, msg: str) -> None:
    """ConfigError(msg) unless `cond`: a config section's validation step."""
    if not cond:
        raise ConfigError(msg)
