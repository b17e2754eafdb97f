"""The `poisson` scheme: SQL-generated Poisson(1) weights, constant memory, close to the exact scheme.

The weights are pinned exactly: an independent replica of the integer hash says which uniform u every
(seed, replicate, cluster) gets, and the Poisson(1) CDF (computed here with 60-digit decimals) says
which weight u must map to. Modular arithmetic picks (replicate, cluster rank) pairs whose u lands on
either side of every CDF step, so every threshold and every weight of the SQL's table is checked.
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from autheval.estimation.estimators import estimate
from autheval.records.read import read_records
from tests.conftest import reference_file
from tests.sql import sql_text

P = 2147483647  # the hash's prime modulus; u lives on the grid t / P
MAX_WEIGHT = 11  # the SQL's last weight (P(X >= 11) = 1.0e-8 is all given 11)


def poisson_cdf() -> list[Decimal]:
    """P(X <= k) for X ~ Poisson(1), k = 0..MAX_WEIGHT-1, to 60 digits."""
    getcontext().prec = 60
    total, term, out = Decimal(0), Decimal(1), []
    for k in range(MAX_WEIGHT):
        if k:
            term /= k
        total += term
        out.append(Decimal(-1).exp() * total)
    return out


CDF = poisson_cdf()


def expected_weight(t: int) -> int:
    """The Poisson(1) quantile of u = t / P: the number of CDF steps at or below u (at most 11)."""
    return sum(1 for f in CDF if Decimal(t) / P >= f)


def rep_key(rep: int, seed: int) -> int:
    return (rep * 48271 + seed % P) % P


def grid_index(seed: int, rep: int, rank: int) -> int:
    """The replica of the SQL's hash: u = grid_index / P."""
    key = rep_key(rep, seed)
    h1 = (key * 69621 + rank) % P
    h2 = (h1 * h1 + key) % P
    return (h2 * 48271 + 12345) % P


def pair_for(t: int, seed: int) -> tuple[int, int]:
    """A (replicate, cluster rank) whose u is t / P: invert the last step, then take a modular square
    root (P = 3 mod 4) on the first replicate where one exists."""
    h2 = (t - 12345) * pow(48271, -1, P) % P
    for rep in range(64):
        key = rep_key(rep, seed)
        square = (h2 - key) % P
        root = pow(square, (P + 1) // 4, P)
        if root * root % P == square:
            rank = (root - key * 69621) % P
            assert grid_index(seed, rep, rank) == t
            return rep, rank
    raise AssertionError("no replicate below 64 reaches this u")


def sql_weights(pairs: list[tuple[int, int]], seed: int, first_rep: int = 0, reps: int | None = None) -> list[int]:
    """The SQL's weight of each (replicate, cluster rank), read back as the total weight of a
    one-cluster analysis per pair (a weight of 0 adds nothing, so its row is absent)."""
    con = duckdb.connect()
    n = len(pairs)
    con.register(
        "cluster_stats",
        pa.table(
            {
                "analysis": [f"p{i}" for i in range(n)],
                "cluster_id": [f"c{i}" for i in range(n)],
                "cluster_rank": pa.array([rank for _, rank in pairs], pa.int32()),
                "n_clusters": [1] * n,
                **{
                    k: [1.0] * n
                    for k in (
                        "n",
                        "sum_changed",
                        "sum_exec",
                        "sum_prop",
                        "sum_gap",
                        "sum_glob",
                        "sum_total_gap",
                        "sum_utility_gap",
                    )
                },
            }
        ),
    )
    reps = reps if reps is not None else max(rep for rep, _ in pairs) + 1 - first_rep
    rows = con.execute(sql_text("replicates_poisson"), {"first_rep": first_rep, "reps": reps, "seed": seed}).fetchall()
    got = {(row[0], row[1]): row[10] for row in rows}  # (analysis, rep) -> c_n, the total weight
    return [int(got.get((f"p{i}", rep), 0.0)) for i, (rep, _) in enumerate(pairs)]


def test_every_step_of_the_poisson_table_is_exact():
    """On both sides of every CDF step, and at both ends of the grid, the SQL gives the weight the
    Poisson(1) distribution gives: one wrong threshold or weight in the table fails here."""
    seed = 20260711
    grid = [0, P - 1]
    for f in CDF:
        above = int(f * P) + 1  # the first grid point with t / P >= f (no step lies on the grid)
        grid += [above - 1, above]
    pairs = [pair_for(t, seed) for t in grid]
    expected = [expected_weight(t) for t in grid]
    assert expected[:2] == [0, MAX_WEIGHT]
    assert expected[2:] == [w for k in range(MAX_WEIGHT) for w in (k, k + 1)]
    assert sql_weights(pairs, seed) == expected


@pytest.mark.parametrize("seed", [20260711, 1, 2**40 + 7])
def test_weights_follow_the_hash_on_a_grid_of_pairs(seed):
    """Every weight on 64 replicates x 300 clusters equals the replica's hash through the exact CDF."""
    pairs = [(rep, rank) for rep in range(64) for rank in range(300)]
    expected = [expected_weight(grid_index(seed, rep, rank)) for rep, rank in pairs]
    assert sql_weights(pairs, seed) == expected
    counts = np.bincount(expected, minlength=MAX_WEIGHT + 1)
    assert counts[:5].min() > 0  # the sample reaches the common weights


def test_replicate_blocks_give_the_same_weights():
    """A replicate's weights depend on (seed, rep, cluster) only, so blocks can be drawn separately."""
    pairs = [(rep, rank) for rep in range(5, 12) for rank in range(50)]
    whole = sql_weights(pairs, 7, first_rep=0, reps=12)
    block = sql_weights(pairs, 7, first_rep=5, reps=7)
    assert whole == block


def poisson_totals(n_clusters: int, reps: int, seed: int = 20260711) -> np.ndarray:
    """Total weight per replicate over n_clusters clusters, in replicate order."""
    con = duckdb.connect()
    con.register(
        "cluster_stats",
        pa.table(
            {
                "analysis": ["w"] * n_clusters,
                "cluster_id": [f"c{i}" for i in range(n_clusters)],
                "cluster_rank": pa.array(range(n_clusters), pa.int32()),
                "n_clusters": [n_clusters] * n_clusters,
                **{
                    k: [1.0] * n_clusters
                    for k in (
                        "n",
                        "sum_changed",
                        "sum_exec",
                        "sum_prop",
                        "sum_gap",
                        "sum_glob",
                        "sum_total_gap",
                        "sum_utility_gap",
                    )
                },
            }
        ),
    )
    sums = con.execute(sql_text("replicates_poisson"), {"first_rep": 0, "reps": reps, "seed": seed}).fetchnumpy()
    return sums["c_n"][np.argsort(sums["rep"])]


def test_weights_have_poisson_one_moments():
    totals = poisson_totals(n_clusters=20000, reps=20)
    # the total of G independent Poisson(1) weights has mean G and variance G
    assert abs(totals.mean() / 20000 - 1) < 0.01
    assert 0.5 < totals.var(ddof=1) / 20000 < 2.0


def test_weights_depend_on_seed_and_are_deterministic():
    a, b = poisson_totals(5000, 10, seed=1), poisson_totals(5000, 10, seed=1)
    c = poisson_totals(5000, 10, seed=2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_blocked_estimates_equal_one_block(monkeypatch):
    """The estimator draws poisson replicates in blocks: small blocks give the same intervals."""
    import autheval.estimation.estimators as estimators

    records = read_records(reference_file("authority_log_example"))
    whole = estimate([records], scheme="poisson", reps=300)
    monkeypatch.setattr(estimators, "POISSON_BLOCK_REPS", 7)
    blocked = estimate([records], scheme="poisson", reps=300)
    for x, y in zip(whole.estimates, blocked.estimates):
        for key in ("estimate", "ci_lower", "ci_upper"):
            assert (x[key] is None and y[key] is None) or abs(x[key] - y[key]) <= 1e-12, (x, y)


def test_poisson_intervals_agree_with_the_exact_scheme():
    records = read_records(reference_file("trace_mixed"), analysis="mixed")
    exact = estimate([records], scheme="reference", reps=2000)
    poisson = estimate([records], scheme="poisson", reps=2000)
    for unit in ("image_weighted", "cluster_equal"):
        x = exact.estimate("mixed", unit, "Delta_authority")
        y = poisson.estimate("mixed", unit, "Delta_authority")
        assert x["estimate"] == y["estimate"]
        width = x["ci_upper"] - x["ci_lower"]
        assert abs(x["ci_lower"] - y["ci_lower"]) < 0.15 * width
        assert abs(x["ci_upper"] - y["ci_upper"]) < 0.15 * width
    assert poisson.check("mixed", "image_weighted")["max_replicate_residual"] <= 1e-12
