"""Random samples of mixed lengths for the exchange tests (tests/unit/test_exchange.py: the wire
format and the host comm; tests/unit/test_sparse_exchange.py: the sparse transport)."""

from __future__ import annotations

import numpy as np

from data.packing import Sample


def random_samples(rng: np.random.Generator, n: int, max_len: int = 40) -> list[Sample]:
    """`n` samples of 3..max_len tokens with 0..6 masked positions (ids below 30000)."""
    out = []
    for _ in range(n):
        length = int(rng.integers(3, max_len + 1))
        m = int(rng.integers(0, min(6, length) + 1))
        ids = rng.integers(0, 30000, length).astype(np.int16)
        seg = (np.arange(length) > length // 2).astype(np.int8)
        pos = np.sort(rng.choice(length, m, replace=False)).astype(np.int16)
        out.append(
            Sample(
                ids, seg, pos, rng.integers(0, 30000, m).astype(np.int16), int(rng.integers(0, 2))
            )
        )
    return out
