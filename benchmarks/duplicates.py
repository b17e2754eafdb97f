"""Near-duplicate search benchmark: the multi-index (pigeonhole) SQL join vs all pairs, in one run.

1. 25k hashes at threshold k (default 4): components from the multi-index join and from the
   all-pairs join, times and ratio, components asserted identical (membership and numbering).
2. 1M hashes: the multi-index join and components, timed; the all-pairs time is extrapolated from an
   all-pairs run on a random sample (time per pair x n(n-1)/2).

Hashes are uniform random 64-bit values (the hardest case for banding: no structure to exploit
is assumed) plus planted near neighbours at distances 1..k+2, so components of every size occur.

Usage: python benchmarks/duplicates.py [--k 4] [--n-small 25000] [--n-large 1000000] [--sample 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb
import numpy as np
import pyarrow as pa

from autheval.raw.duplicates import components, near_pairs


def synthetic_hashes(n: int, k: int, seed: int) -> pa.Table:
    """n image hashes: random values, 5 % of them copies or near copies (1..k+2 bits) of others."""
    rng = np.random.default_rng(seed)
    n_near = n // 20
    base = rng.integers(0, 2**64, size=n - n_near, dtype=np.uint64)
    source = base[rng.integers(0, len(base), n_near)]
    flips = np.zeros(n_near, dtype=np.uint64)
    n_bits = rng.integers(0, k + 3, n_near)  # 0 bits: an exact copy
    for j in range(int(n_bits.max())):
        bit = rng.integers(0, 64, n_near).astype(np.uint64)
        flips ^= np.where(j < n_bits, np.uint64(1) << bit, np.uint64(0))
    values = np.concatenate([base, source ^ flips])
    ids = [f"IMG_{i:08d}" for i in range(n)]
    return pa.table({"image_id": ids, "phash": pa.array(values, pa.uint64())})


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=4, help="Hamming threshold (default 4, AuthEval's)")
    parser.add_argument("--n-small", type=int, default=25_000)
    parser.add_argument("--n-large", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=20_000, help="all-pairs sample for the extrapolation")
    args = parser.parse_args()
    k = args.k
    print(
        f"threshold k = {k}: {k + 1} bands of {64 // (k + 1)}-{-(-64 // (k + 1))} bits; "
        f"DuckDB {duckdb.__version__}, {os.cpu_count()} cores"
    )

    small = synthetic_hashes(args.n_small, k, seed=1)
    multi, t_multi = timed(components, small, k, method="multi_index")
    brute, t_brute = timed(components, small, k, method="all_pairs")
    assert multi.equals(brute), "multi-index and all-pairs components differ"
    n_comp = len(set(multi.column("component_id").to_pylist()))
    print(f"\n{args.n_small:,} hashes: {n_comp:,} components of >= 2 images, {multi.num_rows:,} images in them")
    print(f"  multi-index join   {t_multi:8.2f} s")
    print(f"  all pairs          {t_brute:8.2f} s")
    print(f"  ratio              {t_brute / t_multi:8.1f}x  (identical components: checked)")

    large = synthetic_hashes(args.n_large, k, seed=2)
    values = np.unique(large.column("phash").to_numpy())
    pairs, t_pairs = timed(near_pairs, values, k)
    comps, t_comps = timed(components, large, k)
    n_comp = len(set(comps.column("component_id").to_pylist()))
    print(
        f"\n{args.n_large:,} hashes ({len(values):,} distinct): {pairs.num_rows:,} near pairs, "
        f"{n_comp:,} components, {comps.num_rows:,} images in them"
    )
    print(f"  multi-index pairs  {t_pairs:8.2f} s")
    print(f"  components (total) {t_comps:8.2f} s   (pairs + union + numbering)")

    rng = np.random.default_rng(3)
    sample = rng.choice(values, size=min(args.sample, len(values)), replace=False)
    _, t_sample = timed(near_pairs, sample, k, method="all_pairs")
    m = len(sample)
    per_pair = t_sample / (m * (m - 1) / 2)
    n = len(values)
    estimate = per_pair * n * (n - 1) / 2
    print(
        f"  all pairs, sample of {m:,}: {t_sample:.2f} s ({per_pair * 1e9:.2f} ns/pair) -> "
        f"extrapolated {estimate:,.0f} s ({estimate / 3600:.1f} h) for {n:,}"
    )
    print(f"  ratio (extrapolated all pairs / multi-index components) {estimate / t_comps:,.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
