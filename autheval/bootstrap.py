"""Replicate sums for the exact whole-cluster bootstraps, from numpy's stream.

AuthEval draws `default_rng(seed).integers(0, G, size=G)` once per replicate over clusters in
ascending cluster_id order; drawing several replicates at once yields the identical stream. A replicate's
weighted sums are its cluster multiplicities times the cluster-statistics matrix (sql/cluster_matrix.sql),
so a block of replicates is one dense matrix product (BLAS). Measured here on 5000 x 2090 x 96: 0.02 s,
against 0.55 s for DuckDB's array_inner_product and 3.7 s for list_dot_product; the metrics, intervals
and checks on the resulting sums stay in SQL. Blocks bound memory: the multiplicity buffer and each
block of replicate sums hold at most BLOCK_VALUES doubles (or one replicate's worth when a replicate is
larger), whatever the number of replicates; `product_blocks` yields them one block at a time.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

BLOCK_VALUES = 1 << 23  # doubles in the multiplicity buffer (64 MiB)
REP_BLOCK = 1 << 16  # at most this many replicates per block (bounds what each block becomes downstream)
DRAW_VALUES = 1 << 19  # indices drawn per bincount (4 MiB): stays in cache


def multiplicity_blocks(
    seed: int, n_clusters: int, reps: int, block_values: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first_rep, counts): counts[r, c] = times cluster rank c is drawn in replicate first_rep + r.

    The yielded array is a reused buffer: use it before asking for the next block.
    """
    g = n_clusters
    block_values = block_values or BLOCK_VALUES
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


def block_rows(n_clusters: int, n_columns: int, reps: int, block_values: int | None = None) -> int:
    """Replicates per block: at most REP_BLOCK, and the multiplicities (rows x G) and the sums
    (rows x k) each stay within `block_values` doubles (at least one replicate per block)."""
    return max(1, min(reps, REP_BLOCK, (block_values or BLOCK_VALUES) // max(n_clusters, n_columns, 1)))


def product_blocks(
    seed: int, reps: int, matrix: np.ndarray, block_values: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first_rep, sums): sums[r] = the weighted column sums of replicate first_rep + r, i.e. the
    multiplicities of the stream `seed` times the (G x k) statistics matrix, one block at a time, so
    memory does not grow with the number of replicates. Each yielded array is new."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    g = matrix.shape[0]
    rows = block_rows(g, matrix.shape[1], reps, block_values)
    for start, counts in multiplicity_blocks(seed, g, reps, block_values=rows * g):
        yield start, counts @ matrix


def lockstep_blocks(
    streams: Sequence[tuple[int, np.ndarray]], reps: int, block_values: int | None = None
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield (first_rep, [sums per stream]) for the same block of replicates of several streams
    (seed, G x k matrix), so that everything about one replicate is in one block. All the streams'
    buffers together stay within `block_values` doubles, and a block has at most REP_BLOCK replicates.
    (BLAS may round a sum differently for another block height: one stream of up to REP_BLOCK
    replicates blocks as `product_blocks` does, so the reference study's numbers do not move.)"""
    matrices = [np.ascontiguousarray(m, dtype=np.float64) for _, m in streams]
    width = sum(max(m.shape[0], m.shape[1], 1) for m in matrices)
    rows = block_rows(width, 1, reps, block_values)
    blocks = [product_blocks(seed, reps, m, block_values=rows * max(m.shape[0], m.shape[1], 1))
              for (seed, _), m in zip(streams, matrices)]
    for parts in zip(*blocks):
        yield parts[0][0], [sums for _, sums in parts]


def replicate_products(seed: int, reps: int, matrix: np.ndarray) -> np.ndarray:
    """(reps x k) replicate sums: multiplicities of the stream `seed` times a (G x k) statistics matrix,
    all replicates at once (for small runs and tests; the estimators stream `product_blocks`)."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    out = np.empty((reps, matrix.shape[1]), dtype=np.float64)
    for start, sums in product_blocks(seed, reps, matrix):
        out[start : start + sums.shape[0]] = sums
    return out
