"""Replicate multiplicities for the exact whole-cluster bootstraps, drawn from numpy's stream.

AuthEval draws `default_rng(seed).integers(0, G, size=G)` once per replicate over clusters in
ascending cluster_id order. Drawing a block of replicates at once yields the identical stream, so
replicates are drawn in blocks (bounded memory), turned into per-cluster multiplicities with one
bincount, and handed to SQL as dense vectors (rep, mult DOUBLE[G]) for the dot products.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

# Doubles held per block of multiplicities: 16 Mi values = 128 MiB.
BLOCK_VALUES = 1 << 24


def block_size(n_clusters: int, reps: int, block_values: int = BLOCK_VALUES) -> int:
    return max(1, min(reps, block_values // max(n_clusters, 1)))


def multiplicity_blocks(
    seed: int, n_clusters: int, reps: int, block_values: int = BLOCK_VALUES
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first_rep, counts) with counts[r, c] = times cluster rank c is drawn in replicate r."""
    rng = np.random.default_rng(seed)
    block = block_size(n_clusters, reps, block_values)
    for start in range(0, reps, block):
        rows = min(block, reps - start)
        draws = rng.integers(0, n_clusters, size=(rows, n_clusters))
        draws += (np.arange(rows, dtype=draws.dtype) * n_clusters)[:, None]
        counts = np.bincount(draws.ravel(), minlength=rows * n_clusters)
        yield start, counts.reshape(rows, n_clusters).astype(np.float64)


def multiplicity_table(seed: int, n_clusters: int, first_rep: int, counts: np.ndarray) -> pa.Table:
    """One block as the `boot_multiplicities` relation: seed, n_clusters, rep, mult DOUBLE[G]."""
    rows = counts.shape[0]
    mult = pa.FixedSizeListArray.from_arrays(pa.array(counts.ravel()), n_clusters)
    return pa.table(
        {
            "seed": pa.array(np.full(rows, seed, dtype=np.int64)),
            "n_clusters": pa.array(np.full(rows, n_clusters, dtype=np.int32)),
            "rep": pa.array(np.arange(first_rep, first_rep + rows, dtype=np.int64)),
            "mult": mult,
        }
    )
