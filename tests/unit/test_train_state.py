"""The run's state as it hands it to checkpoints (bert/train/train_state.py): the dict holds
what the on-disk format keeps (bert/train/checkpoint/layout.py), and loading it back restores
the weights, the optimizer, the progress and the RNG at once, the data position only when the
pipeline opens (no data before run_start)."""

from __future__ import annotations

import torch

from bert.train.checkpoint.layout import RANK, RANK_KEYS, TRAINER_KEYS
from bert.train.train_state import TrainState

CPU = torch.device("cpu")


class Position:
    """A stand-in data pipeline: only its position."""

    def __init__(self, step: int = 0):
        self.step = step

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def make_state(seed: int) -> TrainState:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optim = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optim.step()  # moments to save
    return TrainState(model, optim, CPU)


def test_the_state_dict_is_what_a_checkpoint_keeps():
    state = make_state(0)
    state.attach_pipeline(Position(7))
    saved = state.state_dict()
    assert set(saved) == set(TRAINER_KEYS) | {RANK}
    assert set(saved[RANK]) == set(RANK_KEYS)
    assert saved["progress"] == {"step": 0, "samples": 0, "accuracy": 0.0}
    assert saved[RANK]["pipeline"] == {"step": 7}


def test_loading_restores_everything_and_the_data_position_when_the_pipeline_opens():
    state = make_state(0)
    state.attach_pipeline(Position(7))
    state.progress = {"step": 7, "samples": 56, "accuracy": 0.25}
    saved = state.state_dict()
    expected_draw = torch.rand(3)  # what follows the saved RNG

    fresh = make_state(1)
    fresh.load_state_dict(saved)
    assert torch.rand(3).equal(expected_draw)
    assert all(a.equal(b) for a, b in zip(fresh.model.parameters(), state.model.parameters()))
    moments = [fresh.optim.state_dict()["state"], state.optim.state_dict()["state"]]
    assert all(a[key].equal(b[key]) for a, b in zip(*(m.values() for m in moments)) for key in a)
    assert fresh.progress == state.progress
    pipeline = Position()
    assert pipeline.step == 0  # nothing loaded before it is attached
    fresh.attach_pipeline(pipeline)
    assert pipeline.step == 7 and fresh.pipeline is pipeline
    fresh.attach_pipeline(later := Position())  # the position is handed over once
    assert later.step == 0
