"""Tests for data/order/ (strategies, lengths, simulate) and scripts/simulate_balance.py (CPU,
a few seconds)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data.order import lengths as ln
from data.order import strategies as bal
from data.order.node_balance import node_swap_rows
from data.order.simulate import PUBLISHED_TABLE_5, Simulation, simulate_token_range

from commands import run_python

SCRIPT = "scripts/simulate_balance.py"  # from the checkout's root
ALL = tuple(bal.STRATEGIES)

# (world, local, ranks_per_node): world 1, odd local batches, partial and several nodes
SHAPES = [
    (1, 1, 1),
    (1, 5, 8),
    (2, 3, 2),
    (3, 1, 8),
    (4, 7, 2),
    (6, 5, 3),
    (8, 16, 8),
    (16, 3, 8),
    (16, 16, 4),
]


def _is_permutation(assignment: np.ndarray, n: int) -> bool:
    return np.array_equal(np.sort(assignment.ravel()), np.arange(n))


# ------------------------------------------------------------------------- permutations


@pytest.mark.parametrize("world,local,rpn", SHAPES)
@pytest.mark.parametrize("strategy", ALL)
def test_every_strategy_is_a_permutation(strategy, world, local, rpn):
    rng = np.random.default_rng(world * 100 + local)
    lengths = rng.integers(1, 513, size=world * local)
    a = bal.balance(strategy, lengths, world, rpn)
    assert a.shape == (world, local)
    assert _is_permutation(a, world * local)
    # token conservation follows, but check the helper too
    assert bal.tokens_per_rank(lengths, a).sum() == lengths.sum()


@pytest.mark.parametrize("strategy", ALL)
def test_ties_and_constant_lengths_stay_permutations(strategy):
    lengths = np.full(8 * 5, 512)  # 23 % of real samples sit exactly at 512
    a = bal.balance(strategy, lengths, 8, 4)
    assert _is_permutation(a, 40)


@pytest.mark.parametrize("strategy", ALL)
def test_batched_input_equals_one_batch_at_a_time(strategy):
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 513, size=(5, 16 * 6))
    batched = bal.balance(strategy, lengths, 16, 8)
    single = np.stack([bal.balance(strategy, row, 16, 8) for row in lengths])
    np.testing.assert_array_equal(batched, single)


@pytest.mark.parametrize(
    "strategy", [n for n, s in bal.STRATEGIES.items() if s.transport == "sparse"]
)
def test_sparse_transport_computes_the_records_deal(strategy):
    """The sparse transport computes the record's `rows`, not its deal: they must be the same
    rows for every rank."""
    lengths = np.random.default_rng(4).integers(1, 513, size=16 * 5)
    full = bal.balance(strategy, lengths, 16, 4)
    for rank in range(16):
        ranks, rows = bal.STRATEGIES[strategy].rows(lengths, 16, 4, rank)
        np.testing.assert_array_equal(rows, full[ranks])
    assert bal.STRATEGIES[strategy].scope == "world"  # the transport runs over the world


def test_a_sparse_strategy_must_name_its_rows():
    """The transport runs the rows the record names: a sparse record without them (whose deal
    the transport would silently ignore) cannot be built, nor rows without the sparse transport."""
    with pytest.raises(ValueError, match="rows function"):
        bal.Strategy(bal.assign_serpentine, source="shards", scope="world", transport="sparse")
    with pytest.raises(ValueError, match="rows function"):
        bal.Strategy(bal.assign_serpentine, source="shards", scope="world", rows=node_swap_rows)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="unknown balance strategy"):
        bal.balance("random", np.ones(4, int), 2, 2)
    with pytest.raises(ValueError, match="does not split"):
        bal.balance("global_presort", np.ones(5, int), 2, 2)
    with pytest.raises(ValueError, match="whole number"):
        bal.balance("stratified_local_snake", np.ones(12, int), 12, 8)


# ------------------------------------------------------------------------- published orderings


def test_global_presort_matches_padding_exchange_example():
    # [Zeng], section IV-B / Fig. 11 with 2 workers x 2 sequences: sorting gives
    # Seq(0,1), Seq(1,0), Seq(1,1), Seq(0,0); worker i takes sorted positions i, i+2.
    # Global indices: Seq(w, j) = 2*w + j; lengths chosen to produce that sorted order.
    lengths = np.array([100, 400, 300, 200])
    a = bal.balance("global_presort", lengths, 2, 2)
    np.testing.assert_array_equal(a, [[1, 3], [2, 0]])


def test_round_robin_and_snake_on_hand_example():
    lengths = np.array([10, 90, 50, 70, 20, 80, 30, 60, 40])
    # sorted, longest first: 1(90) 5(80) 3(70) | 7(60) 2(50) 8(40) | 6(30) 4(20) 0(10)
    presort = bal.balance("global_presort", lengths, 3, 3)
    np.testing.assert_array_equal(presort, [[1, 7, 6], [5, 2, 4], [3, 8, 0]])
    np.testing.assert_array_equal(bal.tokens_per_rank(lengths, presort), [180, 150, 120])
    # snake: second round dealt right to left
    snake = bal.balance("serpentine", lengths, 3, 3)
    np.testing.assert_array_equal(snake, [[1, 8, 6], [5, 2, 4], [3, 7, 0]])
    np.testing.assert_array_equal(bal.tokens_per_rank(lengths, snake), [160, 150, 140])


def test_local_strategies_on_hand_example():
    # 2 nodes of 2 ranks, 2 samples each; node 0 holds indices 0-3, node 1 indices 4-7
    lengths = np.array([1, 2, 3, 4, 8, 7, 6, 5])
    presort = bal.balance("stratified_local_presort", lengths, 4, 2)
    np.testing.assert_array_equal(presort, [[3, 1], [2, 0], [4, 6], [5, 7]])
    snake = bal.balance("stratified_local_snake", lengths, 4, 2)
    np.testing.assert_array_equal(snake, [[3, 0], [2, 1], [4, 7], [5, 6]])
    for name in ("none", "stratified"):
        np.testing.assert_array_equal(bal.balance(name, lengths, 4, 2), np.arange(8).reshape(4, 2))


@pytest.mark.parametrize("world,local,rpn", [(16, 16, 8), (24, 5, 4), (8, 3, 2), (4, 7, 8)])
@pytest.mark.parametrize(
    "strategy", sorted(n for n, s in bal.STRATEGIES.items() if s.scope != "world")
)
def test_local_strategies_never_cross_nodes(strategy, world, local, rpn):
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 513, size=(3, world * local))
    a = bal.balance(strategy, lengths, world, rpn)
    node_size = min(rpn, world)
    node_of_rank = (np.arange(world) // node_size)[None, :, None]
    node_of_sample = a // (node_size * local)
    assert np.all(node_of_sample == node_of_rank)


# ------------------------------------------------------------------------- lengths and strata


def test_sample_lengths_follows_reference_histogram():
    # REFERENCE.md section 2: 37.3 / 19.7 / 11.7 / 31.4 %, about 23 % at 512, mean about 254
    x = ln.sample_lengths(400_000, 512, np.random.default_rng(0))
    assert x.min() >= 1 and x.max() == 512
    shares = np.bincount(ln.stratum_of(x, ln.strata_edges(512)), minlength=4) / x.size
    np.testing.assert_allclose(shares, [0.373, 0.197, 0.117, 0.314], atol=0.004)
    assert abs((x == 512).mean() - 0.23) < 0.004
    assert 250 < x.mean() < 259


def test_sample_lengths_scales_to_other_max_lengths():
    x = ln.sample_lengths((100, 1000), 128, np.random.default_rng(0))
    assert x.shape == (100, 1000) and x.max() == 128
    assert abs((x == 128).mean() - 0.23) < 0.01
    assert abs((x <= 32).mean() - 0.373) < 0.01


def test_strata_counts_round_to_the_local_batch():
    fracs = [0.373, 0.197, 0.117, 0.314]
    np.testing.assert_array_equal(ln.strata_counts(16, fracs), [6, 3, 2, 5])
    for local in (1, 3, 7, 13, 56):
        counts = ln.strata_counts(local, fracs)
        assert counts.sum() == local and counts.min() >= 0
        assert np.all(np.abs(counts - np.asarray(fracs) / sum(fracs) * local) < 1)


@pytest.mark.parametrize("world,local", [(8, 16), (3, 7), (1, 5)])
def test_stratified_draw_has_exact_counts_per_rank(world, local):
    rng = np.random.default_rng(3)
    pool = ln.sample_lengths(5000, 512, rng)
    fracs = [0.373, 0.197, 0.117, 0.314]
    idx = ln.stratified_draw(pool, world, local, fracs, rng)
    assert idx.shape == (world, local)
    assert np.unique(idx).size == idx.size  # drawn without replacement
    strata = ln.stratum_of(pool[idx], ln.strata_edges(512))
    want = ln.strata_counts(local, fracs)
    for row in strata:
        np.testing.assert_array_equal(np.bincount(row, minlength=4), want)


def test_stratified_draw_defaults_to_pool_shares_and_checks_pool_size():
    rng = np.random.default_rng(4)
    pool = np.array([10] * 30 + [500] * 10)  # 75 % short, 25 % long
    idx = ln.stratified_draw(pool, 2, 4, None, rng)
    np.testing.assert_array_equal((pool[idx] == 500).sum(axis=1), [1, 1])
    with pytest.raises(ValueError, match="stratum"):
        ln.stratified_draw(pool, 20, 4, None, rng)


def test_simulation_stratified_batches_have_exact_counts():
    pmf = ln.length_pmf(512)
    edges = ln.strata_edges(512)
    x = ln.sample_stratified_lengths(10, 8, 16, np.random.default_rng(0), pmf, edges)
    strata = ln.stratum_of(x.reshape(10, 8, 16), edges)
    counts = np.apply_along_axis(np.bincount, -1, strata, minlength=4)
    assert np.all(counts == [6, 3, 2, 5])


def test_lengths_from_shards_reads_vlen_and_fixed(tmp_path):
    h5py = pytest.importorskip("h5py")
    lengths = [5, 128, 512, 77]
    with h5py.File(tmp_path / "part_00000_of_00002.hdf5", "w") as f:
        ds = f.create_dataset("input_ids", (len(lengths),), dtype=h5py.vlen_dtype(np.int16))
        for i, n in enumerate(lengths):
            ds[i] = np.arange(n, dtype=np.int16)
    with h5py.File(tmp_path / "part_00001_of_00002.hdf5", "w") as f:  # fixed-length format
        mask = np.zeros((2, 512), np.int8)
        mask[0, :300] = 1
        mask[1, :12] = 1
        f["input_ids"] = np.zeros((2, 512), np.int16)
        f["input_mask"] = mask
    got = ln.lengths_from_shards(str(tmp_path / "part_*.hdf5"))
    np.testing.assert_array_equal(got, lengths + [300, 12])


# ------------------------------------------------------------------------- [Kim] Table 5


# [Kim] (Samsung), appendix C.2, Table 5 (PUBLISHED_TABLE_5), also REFERENCE.md section 5. The
# paper does not state the GPU count; our simulation matches it (within about 1 %) at 1024 GPUs,
# their cluster size, and not at 8 or 64 GPUs, so the test runs 1024 ranks.
@pytest.fixture(scope="module")
def table_5():
    rng = np.random.default_rng(0)
    return simulate_token_range(Simulation(1024, 16, 8, 100, ln.length_pmf(512)), rng)


def test_simulation_reproduces_table_5_values(table_5):
    for name, (lo, hi) in PUBLISHED_TABLE_5.items():
        assert table_5[name]["min_tokens"] == pytest.approx(lo, rel=0.05), name
        assert table_5[name]["max_tokens"] == pytest.approx(hi, rel=0.05), name


def test_simulation_reproduces_table_5_ordering(table_5):
    spread = {k: v["max_tokens"] - v["min_tokens"] for k, v in table_5.items()}
    # published spreads: none 4573 > stratified 862 > local presort 658 > global presort 506
    # > stratified + local snake 346
    published_order = sorted(
        PUBLISHED_TABLE_5, key=lambda k: PUBLISHED_TABLE_5[k][0] - PUBLISHED_TABLE_5[k][1]
    )
    ours = sorted(PUBLISHED_TABLE_5, key=lambda k: -spread[k])
    assert ours == published_order
    assert spread["serpentine"] < spread["stratified_local_snake"]  # not in Table 5


def test_single_node_ordering():
    # One node of 8: local presort is the global presort there, and no better than the
    # stratified draw alone; snake dealing is what wins (spread about 70 vs 400+ tokens).
    r = simulate_token_range(
        Simulation(8, 16, 8, 400, ln.length_pmf(512)), np.random.default_rng(0)
    )
    spread = {k: v["max_tokens"] - v["min_tokens"] for k, v in r.items()}
    assert spread["none"] == max(spread.values())
    assert spread["stratified_local_snake"] < 0.5 * spread["stratified_local_presort"]
    assert spread["serpentine"] < 0.5 * spread["global_presort"]


def test_script_writes_json(tmp_path):
    out = tmp_path / "sim.json"
    proc = run_python(SCRIPT, "--trials", "20", "--ranks", "16", "--json", str(out), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "stratified_local_snake" in proc.stdout
    # schema: tests/tools/test_simulate_balance.py
    result = json.loads(out.read_text())["strategies"]
    assert set(result) == set(bal.STRATEGIES)
    for v in result.values():
        assert v["min_tokens"] <= v["max_tokens"]


def test_script_plot_needs_matplotlib(tmp_path):
    try:
        import matplotlib  # noqa: F401

        pytest.skip("matplotlib is installed")
    except ImportError:
        pass
    proc = run_python(SCRIPT, "--trials", "2", "--plot", str(tmp_path / "x.png"), timeout=60)
    assert proc.returncode != 0 and "pip install 'open-bert-mlperf[plot]'" in proc.stderr


def test_script_plot_renders_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "x.png"
    proc = run_python(SCRIPT, "--trials", "2", "--plot", str(png), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
