"""scripts/simulate_balance.py's traffic measures and its --json / --ranks-sweep output.

The token ranges against [Kim]'s Table 5 are tested in tests/unit/test_balance.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from data.comm import sparse as sx
from data.order import lengths as ln
from data.order import strategies as bal
from data.order.simulate import Simulation, simulate_token_range

from commands import run_python

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "simulate_balance.py"
KEYS = {"spread_tokens", "max_over_min", "moved_fraction", "host_bytes_per_rank_per_step"}


@pytest.fixture(scope="module")
def sim():
    from bert.tools import simulate_balance

    return simulate_balance


def _args(sim, *argv):
    return sim.parse_args(list(argv))


def test_all_gather_bytes_are_the_codecs(sim):
    # 4 ranks x 2 samples, nodes of 2: what a rank receives in data/comm/host.py's all-gathers
    lengths = np.array([[10, 20, 30, 40, 50, 60, 70, 80]])
    masked = sim.masked_counts(lengths, 76)
    wire = sx.META_BYTES + sx.payload_bytes(lengths, masked)[0]  # meta row + payload
    own = wire.reshape(4, 2).sum(axis=1)
    a = bal.balance("serpentine", lengths, 4, 2)
    np.testing.assert_array_equal(
        sim.host_bytes("serpentine", lengths, masked, a, 2)[0], own.sum() - own
    )
    a = bal.balance("stratified_local_snake", lengths, 4, 2)
    node = np.repeat(own.reshape(2, 2).sum(axis=1), 2)
    np.testing.assert_array_equal(
        sim.host_bytes("stratified_local_snake", lengths, masked, a, 2)[0], node - own
    )
    assert not sim.host_bytes("none", lengths, masked, bal.balance("none", lengths, 4, 2), 2).any()
    a = bal.balance("node_swap", lengths, 4, 2)
    np.testing.assert_array_equal(
        sim.host_bytes("node_swap", lengths, masked, a, 2), sx.received_bytes(lengths, masked, a)
    )


def test_masked_counts_follow_the_data_preparation(sim):
    # round(0.15 * l) (half to even), at least 1, at most max_predictions_per_seq
    np.testing.assert_array_equal(
        sim.masked_counts(np.array([1, 3, 10, 30, 300, 512]), 76), [1, 1, 2, 4, 45, 76]
    )


def test_moved_fraction(sim):
    a = np.arange(8).reshape(4, 2)  # identity: nothing moves
    assert sim.moved_fraction(a, 2) == 0.0
    a = np.array([[4, 1], [2, 3], [0, 5], [6, 7]])  # samples 0 and 4 cross nodes
    assert sim.moved_fraction(a, 2) == 0.25


def test_token_ranges_equal_simulate_token_range(sim):
    args = _args(sim, "--ranks", "32", "--trials", "7", "--seed", "3")
    ours = sim.simulate(32, args, 7, ln.length_pmf(512))
    theirs = simulate_token_range(
        Simulation(32, 16, 8, 7, ln.length_pmf(512)), np.random.default_rng(3)
    )
    for name, r in theirs.items():
        assert ours[name]["min_tokens"] == pytest.approx(r["min_tokens"])
        assert ours[name]["max_tokens"] == pytest.approx(r["max_tokens"])


def test_issue_15_targets_in_the_simulator(sim):
    """1,024 ranks x 16, 8 per node: node_swap's spread within 2x serpentine's and 72 tokens,
    at most 10 % moved, at most 1/20 of the full all-gather's bytes per rank."""
    args = _args(sim, "--ranks", "1024", "--timing-batches", "1")
    r = sim.simulate(
        1024,
        args,
        4,
        ln.length_pmf(512),
        strategies=("serpentine", "node_swap", "stratified_node_swap"),
    )
    for name in ("node_swap", "stratified_node_swap"):
        assert r[name]["spread_tokens"] <= min(72, 2 * r["serpentine"]["spread_tokens"])
        assert r[name]["moved_fraction"] <= 0.10
        full = r["serpentine"]["host_bytes_per_rank_per_step"]
        assert r[name]["host_bytes_per_rank_per_step"] <= full / 20
    assert r["serpentine"]["moved_fraction"] == pytest.approx(127 / 128, abs=0.003)


def test_script_json_and_sweep(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "sim.json", tmp_path / "sweep.png"
    sweep = ["--ranks-sweep", "16,32", "--sweep-trials", "3", "--timing-batches", "1"]
    args = ["--ranks", "16", "--trials", "5", *sweep, "--json", out, "--plot", png]
    proc = run_python(SCRIPT, *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(result["strategies"]) == set(bal.STRATEGIES)
    for v in result["strategies"].values():
        assert KEYS <= set(v)
    assert set(result["sweep"]) == {"16", "32"}
    for point in result["sweep"].values():
        assert set(point) == set(bal.STRATEGIES) and all(KEYS <= set(v) for v in point.values())
    assert "host KB per rank per step" in proc.stdout and "node_swap" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
