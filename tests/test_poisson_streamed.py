"""The `poisson` scheme's statistics matrix read a piece at a time (autheval.estimation.bootstrap.
poisson_piece_products, issue 30): the replicate sums of the whole matrix to the bit, without holding it
(10^7 clusters: 1.3 GB of doubles)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import autheval.estimation.bootstrap as bootstrap
import autheval.estimation.estimators as estimators
from autheval.estimation.estimators import estimate
from tests.test_compiled_stream import _log


def whole_matrix_sums(seed: int, reps: int, matrix: np.ndarray) -> np.ndarray:
    """The replicate sums as the scheme formed them from the whole matrix: a block of POISSON_BLOCK
    replicates at a time (estimators._poisson_blocks)."""
    block = bootstrap.POISSON_BLOCK
    return np.vstack(
        [bootstrap.poisson_products(seed, first, min(block, reps - first), matrix) for first in range(0, reps, block)]
    )


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pieces_give_the_whole_matrix_sums_to_the_bit(workers):
    """Clusters in three pieces and a short one, replicates in two blocks and a short one: every sum
    equal to the bit, on any number of threads (the same products, added in piece order)."""
    matrix = np.random.default_rng(5).standard_normal((3 * bootstrap.POISSON_CHUNK + 123, 16)) * 1e3
    reps = 2 * bootstrap.POISSON_BLOCK + 17
    pieces = (matrix[a : a + bootstrap.POISSON_CHUNK].copy() for a in range(0, len(matrix), bootstrap.POISSON_CHUNK))
    streamed = bootstrap.poisson_piece_products(20260711, reps, pieces, workers=workers)
    assert streamed is not None and np.array_equal(streamed, whole_matrix_sums(20260711, reps, matrix))


def test_no_piece_is_no_sums():
    assert bootstrap.poisson_piece_products(1, 10, iter([])) is None


@pytest.fixture(scope="module")
def records():
    return _log(60_000, 3 * bootstrap.POISSON_CHUNK + 500)


def test_the_streamed_scheme_gives_the_whole_matrix_estimates(records, monkeypatch):
    """Every estimate, interval and p-value of the poisson scheme equal, streamed or from the whole
    matrix (the path taken where the rows come out of order)."""
    streamed = estimate([records], scheme="poisson", reps=600)

    def out_of_order(*args, **kwargs):
        raise estimators._RowsOutOfOrder

    monkeypatch.setattr(estimators, "_streamed_poisson_sums", out_of_order)
    whole = estimate([records], scheme="poisson", reps=600)
    assert streamed.estimates == whole.estimates and streamed.checks == whole.checks


def test_the_poisson_scheme_never_holds_the_whole_matrix(monkeypatch):
    """The peak of the arrays this process allocates stays far below the matrix (clusters x 16 doubles:
    25.6 MB here; a block of 64 replicates' weights of a piece is 2 MB)."""
    records = _log(200_000, 200_000)
    monkeypatch.setattr(estimators, "MATRIX_BATCH_ROWS", 2048, raising=False)
    matrix_bytes = records.n_clusters * len(estimators.MATRIX_TO_SUMS) * 8
    tracemalloc.start()
    try:
        estimate([records], scheme="poisson", reps=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < matrix_bytes / 4, (peak, matrix_bytes)
