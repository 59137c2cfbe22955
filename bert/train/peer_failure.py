"""A collective that failed because of another rank, said in one line naming the rank.

A rank that stalls (frozen, not dead) leaves its peers waiting in the next collective until
`dist.timeout_s` (set at init_process_group); gloo then raises "Timed out waiting ...", which
names neither the rank nor the step. A rank that dies gives its peers "Connection closed by
peer". `explain` turns either into a PeerLost error: every rank whose collective failed leaves its
mark in the job's rendezvous store; after a short grace for the others' marks, the ranks
without a mark are the ones that never came (stalled or dead).
"""

from __future__ import annotations

import re
import time

import torch.distributed as dist

from bert.core.errors import PeerLost
from bert.train.distributed import DistContext

TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)
PEER_GONE = re.compile(r"connection (closed|reset)|broken pipe|peer", re.IGNORECASE)
MARK = "open_bert/collective_failed/{rank}"
GRACE_S = 3.0  # for the other waiting ranks to time out too and leave their mark


def _text(err: BaseException) -> str:
    parts = []
    while err is not None and len(parts) < 5:
        parts.append(str(err))
        err = err.__cause__ or err.__context__
    return " ".join(parts)


def explain(err: BaseException, ctx: DistContext, step: int, timeout_s: float) -> PeerLost | None:
    """A PeerLost error for `err` if it is a collective failed by a peer, else None."""
    if not ctx.is_distributed or not isinstance(err, RuntimeError):
        return None
    text = _text(err)
    timed_out = bool(TIMED_OUT.search(text))
    if not timed_out and not PEER_GONE.search(text):
        return None
    missing = _missing_ranks(ctx)
    who = (
        f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
        if missing
        else "a peer rank"
    )
    if timed_out:
        return PeerLost(
            f"{who} stalled: rank {ctx.rank} waited {timeout_s:g} s "
            f"(dist.timeout_s) for {'them' if len(missing) > 1 else 'it'} in a "
            f"collective of step {step}"
        )
    return PeerLost(
        f"{who} died or left the job during step {step} (rank {ctx.rank} lost its connection)"
    )


def _missing_ranks(ctx: DistContext) -> list[int]:
    """The ranks that left no mark within GRACE_S; [] when the store cannot say."""
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(MARK.format(rank=ctx.rank), "1")
        deadline = time.monotonic() + GRACE_S
        while True:
            missing = [r for r in range(ctx.world_size) if not store.check([MARK.format(rank=r)])]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.2)
    except Exception:  # noqa: BLE001 - the store went with a dead rank: say less, not crash
        return []
