"""The C counting loop (autheval/estimation/_stream_counts.c) is numpy's stream exactly: multiplicities equal to
`default_rng(seed).integers` + `bincount` for many seeds, cluster counts (rejection-heavy ones
included) and row splits; estimates identical to the byte with and without it; bad arguments refused;
and the estimators' sums do not depend on DuckDB's threads (same inputs, same bytes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import autheval.estimation.bootstrap as bootstrap
from autheval.estimation import compiled_stream
from autheval.estimation.compiled_stream import CompiledStream

# numpy's rejection threshold (2^32 mod G) is 99.5% of G here (G = 900,036): about 190 rejected values a row
REJECTION_HEAVY = next(g for g in range(900_000, 1_100_000) if (1 << 32) % g > 0.97 * g)


def numpy_counts(rng: np.random.Generator, g: int, rows: int) -> np.ndarray:
    draws = rng.integers(0, g, size=(rows, g))
    return np.stack([np.bincount(row, minlength=g) for row in draws]).astype(np.float64)


def test_the_extension_is_built_here():
    assert compiled_stream.extension() is not None, "autheval.estimation._stream_counts was not built (no C compiler?)"


@pytest.mark.parametrize("g", [2, 3, 10, 1001, 65_536, 100_000, REJECTION_HEAVY])
@pytest.mark.parametrize("seed", [7, 20260710, 20260711])
def test_counts_are_numpys_stream(g, seed):
    rng, stream = np.random.default_rng(seed), CompiledStream(seed, g)
    splits = (1, 3, 2) if g > 200_000 else (1, 3, 2, 5, 1)  # crossing buffer refills mid-row
    for rows in splits:
        out = stream.counts(np.empty((rows, g)))
        assert np.array_equal(out, numpy_counts(rng, g, rows)), (g, seed, rows)


def test_bad_arguments_are_refused():
    stream = CompiledStream(1, 10)
    with pytest.raises(ValueError, match="bad state length"):
        stream.module.counts(stream.state[:-1].copy(), 10, np.empty((1, 10)))
    with pytest.raises(ValueError):
        stream.module.counts(stream.state, 10, np.empty((1, 9)))
    with pytest.raises(ValueError):
        stream.module.counts(stream.state, 1, np.empty((1, 1)))
    with pytest.raises(TypeError):
        stream.module.counts(stream.state, 10, np.empty((1, 10)).tobytes())  # read-only output


@pytest.mark.parametrize("g,k", [(40, 4), (5_000, 3), (40_000, 3), (40_000, 12)])
def test_products_identical_with_and_without_the_extension(monkeypatch, g, k):
    matrix = np.random.default_rng(g).standard_normal((g, k))
    compiled = bootstrap.replicate_products(20260713, 120, matrix)
    monkeypatch.setenv("AUTHEVAL_COMPILED", "0")
    assert not compiled_stream.wanted(g)
    assert np.array_equal(compiled, bootstrap.replicate_products(20260713, 120, matrix))


def _log(n_cases: int, n_clusters: int):
    from autheval.records.read import records_from_table

    rng = np.random.default_rng(n_cases)
    changed = rng.random(n_cases) < 0.3
    execd = np.round(rng.normal(-2, 1.5, n_cases), 1)
    table = pa.table(
        {
            "case_id": [f"c{i:07d}" for i in range(n_cases)],
            "cluster_id": [f"k{i % n_clusters:06d}" for i in range(n_cases)],
            "proposed_action": np.where(changed, "a1", "a0").tolist(),
            "executed_action": ["a0"] * n_cases,
            "utility_executed_local": execd.astype(str).tolist(),
            "utility_proposed_local": np.where(changed, execd - np.round(rng.random(n_cases), 1), execd)
            .astype(str)
            .tolist(),
        }
    )
    return records_from_table(table, "log", "log", "0" * 64)


@pytest.mark.parametrize("scheme", ["evaluator", "reference"])
def test_estimates_identical_with_and_without_the_extension(monkeypatch, scheme):
    from autheval.estimation.estimators import estimate

    records = _log(6_000, 1_500)
    with_extension = estimate([records], scheme=scheme, reps=300).estimates
    monkeypatch.setenv("AUTHEVAL_COMPILED", "0")
    assert estimate([records], scheme=scheme, reps=300).estimates == with_extension


@pytest.mark.parametrize("module", ["autheval.estimation.estimators", "autheval.estimation.analytic"])
def test_estimator_sums_run_on_one_duckdb_thread(monkeypatch, module):
    """On several threads DuckDB adds partial sums in the order the threads finish (the per-cluster
    sums of 10M records differed between runs in the last bit), so the estimators' connection runs on
    one thread: same inputs, same bytes."""
    import importlib

    from autheval.estimation.analytic import delta_method_rows
    from autheval.estimation.estimators import estimate

    target = importlib.import_module(module)
    opened = []
    real = target.connect

    def spy(*args, **kwargs):
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(target, "connect", spy)
    records = _log(600, 150)
    if module == "autheval.estimation.estimators":
        estimate([records], scheme="reference", reps=50)
    else:
        delta_method_rows([records])
    assert opened and all(con.execute("SELECT current_setting('threads')").fetchone()[0] == 1 for con in opened)


@pytest.mark.parametrize("seed", [0, 20260711, 2**62 - 1])
def test_poisson_weights_in_c_are_numpys(seed):
    """The C weights equal the numpy hash (itself checked against the SQL's in test_perf_behaviour),
    across replicate blocks, rank pieces and the wrap of the hash past 2^31 - 1."""
    for first_rep, reps, first_rank, n in ((0, 7, 0, 5000), (250, 3, 16_384, 16_384), (999, 2, 123_457, 777)):
        c = bootstrap.poisson_weights(seed, first_rep, reps, first_rank, n)
        ref = bootstrap.numpy_poisson_weights(seed, first_rep, reps, first_rank, n)
        assert c.dtype == np.float64 and np.array_equal(c, ref)
    # a block whose hash wraps: rep_key * 69621 + first_rank lands just below 2^31 - 1
    p = bootstrap.HASH_PRIME
    rep_key = (0 * 48271 + seed % p) % p
    first_rank = (p - (rep_key * 69621) % p - 3) % p
    if first_rank < 2**31 - 100:
        c = bootstrap.poisson_weights(seed, 0, 1, first_rank, 10)
        assert np.array_equal(c, bootstrap.numpy_poisson_weights(seed, 0, 1, first_rank, 10))
    assert set(np.unique(bootstrap.poisson_weights(seed, 0, 50, 0, 20_000))) <= set(range(12))
