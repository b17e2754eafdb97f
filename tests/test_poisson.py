"""The `poisson` scheme: SQL-generated Poisson(1) weights, constant memory, close to the exact scheme."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from autheval.estimators import estimate
from autheval.records import read_records
from tests.conftest import reference_file
from warehouse.sql import load_sql


def poisson_weights(n_clusters: int, reps: int, seed: int = 20260711) -> np.ndarray:
    """The weights the SQL draws, read back through a one-case-per-cluster table (sum_exec = 1)."""
    con = duckdb.connect()
    stats = pa.table({
        "analysis": ["w"] * n_clusters, "cluster_id": [f"c{i}" for i in range(n_clusters)],
        "cluster_rank": pa.array(range(n_clusters), pa.int32()), "n_clusters": [n_clusters] * n_clusters,
        **{k: [1.0] * n_clusters for k in ("n", "sum_changed", "sum_exec", "sum_prop", "sum_gap",
                                           "sum_glob", "sum_total_gap", "sum_utility_gap")},
    })  # fmt: skip
    con.register("cluster_stats", stats)
    sums = con.execute(load_sql("replicates_poisson"), {"reps": reps, "seed": seed}).fetchnumpy()
    return sums["c_n"][np.argsort(sums["rep"])]  # total weight per replicate, in replicate order


def test_weights_have_poisson_one_moments():
    totals = poisson_weights(n_clusters=20000, reps=20)
    # the total of G independent Poisson(1) weights has mean G and variance G
    assert abs(totals.mean() / 20000 - 1) < 0.01
    assert 0.5 < totals.var(ddof=1) / 20000 < 2.0


def test_weights_depend_on_seed_and_are_deterministic():
    a, b = poisson_weights(5000, 10, seed=1), poisson_weights(5000, 10, seed=1)
    c = poisson_weights(5000, 10, seed=2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


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
