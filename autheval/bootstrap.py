"""Replicate sums for the exact whole-cluster bootstraps, from numpy's stream.

AuthEval draws `default_rng(seed).integers(0, G, size=G)` once per replicate over clusters in
ascending cluster_id order; drawing several replicates at once yields the identical stream. A replicate's
weighted sums are its cluster multiplicities times the cluster-statistics matrix (sql/cluster_matrix.sql),
so a block of replicates is one dense matrix product (BLAS). Measured here on 5000 x 2090 x 96: 0.02 s,
against 0.55 s for DuckDB's array_inner_product and 3.7 s for list_dot_product; the metrics, intervals
and checks on the resulting sums stay in SQL. Blocks bound memory: the multiplicity buffer holds at most
BLOCK_VALUES doubles, whatever the number of clusters and replicates.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

BLOCK_VALUES = 1 << 23  # doubles in the multiplicity buffer (64 MiB)
DRAW_VALUES = 1 << 19  # indices drawn per bincount (4 MiB): stays in cache


def multiplicity_blocks(
    seed: int, n_clusters: int, reps: int, block_values: int = BLOCK_VALUES
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first_rep, counts): counts[r, c] = times cluster rank c is drawn in replicate first_rep + r.

    The yielded array is a reused buffer: use it before asking for the next block.
    """
    g = n_clusters
    rng = np.random.default_rng(seed)
    block = max(1, min(reps, block_values // g))
    draw_rows = max(1, min(block, DRAW_VALUES // g))
    buffer = np.empty((block, g), dtype=np.float64)
    offsets = (np.arange(draw_rows, dtype=np.int64) * g)[:, None]
    for start in range(0, reps, block):
        rows = min(block, reps - start)
        for first in range(0, rows, draw_rows):
            r = min(draw_rows, rows - first)
            draws = rng.integers(0, g, size=(r, g))  # int64: the dtype decides the stream
            draws += offsets[:r]
            buffer[first : first + r] = np.bincount(draws.ravel(), minlength=r * g).reshape(r, g)
        yield start, buffer[:rows]


def replicate_products(seed: int, reps: int, matrix: np.ndarray) -> np.ndarray:
    """(reps x k) replicate sums: multiplicities of the stream `seed` times a (G x k) statistics matrix."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    out = np.empty((reps, matrix.shape[1]), dtype=np.float64)
    for start, counts in multiplicity_blocks(seed, matrix.shape[0], reps):
        np.matmul(counts, matrix, out=out[start : start + counts.shape[0]])
    return out
