"""What a checkpoint keeps of a training run, handed over as one dict (torchtitan's
`state_dict` / `load_state_dict`), so the checkpoint code (bert/train/checkpoint/) saves and
restores it without knowing the trainer's parts:

    "model"       the weights
    "optimizer"   the optimizer's state with the lr schedule and the fp16 loss scale
    "progress"    {"step", "samples", "accuracy"}: where the run is
    "rank"        this rank's own: {"rng": its torch generators (dropout draws from them),
                  "pipeline": its data position}

All but "rank" is the same on every rank. The data pipeline opens only at run_start (no data
is read before it), after the checkpoint was restored at init: its saved position waits here
until the pipeline is attached.
"""

from __future__ import annotations

from typing import Any

import torch

from bert.train.checkpoint import RANK


class TrainState:
    def __init__(self, model: torch.nn.Module, optim, device: torch.device):
        """model: the unwrapped model; optim: the project's optimizer (bert/optim/registry.py),
        which holds the schedule and the loss scale."""
        self.model, self.optim, self.device = model, optim, device
        self.progress = {"step": 0, "samples": 0, "accuracy": 0.0}
        self.pipeline = None  # attach_pipeline, at run_start
        self._position: dict | None = None  # a restored data position, till the pipeline opens

    def state_dict(self) -> dict:
        """Collective: the sharded optimizer gathers its shards."""
        optimizer = self.optim.state_dict()
        return {
            "model": self.model.state_dict(),
            "optimizer": optimizer,
            "progress": dict(self.progress),
            RANK: {"rng": rng_state(self.device), "pipeline": self.pipeline.state_dict()},
        }

    def load_state_dict(self, state: dict) -> None:
        """The RNG last, so nothing after it draws; the data position when the pipeline opens."""
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optimizer"])
        self.progress = dict(state["progress"])
        self._position = state[RANK]["pipeline"]
        set_rng_state(state[RANK]["rng"], self.device)

    def attach_pipeline(self, pipeline) -> None:
        """The run's data pipeline, just opened: it continues from a restored position."""
        self.pipeline, position, self._position = pipeline, self._position, None
        if position is not None:
            pipeline.load_state_dict(position)


def rng_state(device: torch.device) -> dict[str, Any]:
    """This rank's torch generators."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
