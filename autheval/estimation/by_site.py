"""The `poisson_by_site` scheme: the `poisson` scheme's Poisson(1) weights keyed by site, so that one
evaluation of several sites' records gives, to the bit, the replicates a hub pools from their exports
(autheval/sites/).

Where `poisson` weights cluster rank r of an analysis by the stream `seed` (bootstrap.poisson_weights),
`poisson_by_site` weights it by the stream `site_seed(seed, site)` at the cluster's rank within its site.
The site is the cluster id's part before its first ':' (ids namespaced '<site>:<id>', as a hub names a
site's clusters); a cluster id without one, with an empty id after it, or whose site breaks the rule of
every name (vocabulary.name_problem: not `all`) is refused. Each site's replicate sums are formed on its own
clusters (bootstrap.poisson_products, as `site export` forms them), then added over the sites in
site-name order (`sum_over_sites`, the hub's addition), so the floating sums are the same numbers.
Two analyses on identical clusters get identical weights, so paired contrasts stay paired.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence

import numpy as np

from autheval.errors import RecordError
from autheval.estimation.bootstrap import BUCKET_BITS, POISSON_BLOCK, POISSON_CDF, POISSON_CHUNK, poisson_products

SITE_SCHEME = "poisson_by_site"
SITE_SEPARATOR = ":"


def site_seed(seed: int, site: str) -> int:
    """The seed of a site's poisson weights: `seed` namespaced by the site's name (a hash, below 2^62),
    so that no two sites' clusters share a weight stream."""
    digest = hashlib.sha256(f"autheval-site-seed\0{int(seed)}\0{site}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


def sum_over_sites(parts: Iterable[np.ndarray]) -> np.ndarray:
    """The sites' replicate sums added one site after another, in the order given (site-name order):
    the one addition of the hub and of this scheme, so both give the same floating sums."""
    total = None
    for part in parts:
        total = np.array(part, dtype=np.float64, copy=True) if total is None else total + part
    if total is None:
        raise ValueError("no site to add")
    return total


def site_poisson_products(
    seed: int, runs: Sequence[tuple[str, int, int]], first_rep: int, reps: int, matrix: np.ndarray
) -> np.ndarray:
    """(reps x k) replicate sums of `poisson_by_site` over a (G x k) statistics matrix in rank order:
    `runs` are (site, first row, clusters) in site-name order; each site's rows are weighted by its own
    stream at their rank within the site and the sites' sums added by `sum_over_sites`."""
    return sum_over_sites(
        poisson_products(site_seed(seed, site), first_rep, reps, matrix[first : first + n]) for site, first, n in runs
    )


# The secret scheme's Poisson(1) weights by inversion of 32-bit uniforms: weight(r) = #{j : r >= CUTS[j]},
# looked up by r's top bits (BUCKET_WEIGHT), exactly only where a cutpoint falls inside the bucket; capped
# at 11 (probability 1e-9) as the hashed weights are. 2.7x faster than numpy's `poisson` here.
SECRET_CUTS = np.array([math.ceil(c * 2**32) for c in POISSON_CDF], dtype=np.uint64)
_STARTS = np.arange(1 << (32 - BUCKET_BITS), dtype=np.uint64) << np.uint64(BUCKET_BITS)
SECRET_BUCKET_WEIGHT = np.searchsorted(SECRET_CUTS, _STARTS, side="right").astype(np.float64)
SECRET_BUCKET_MIXED = (
    np.searchsorted(SECRET_CUTS, _STARTS + np.uint64((1 << BUCKET_BITS) - 1), side="right") != SECRET_BUCKET_WEIGHT
)


def secret_weights(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Poisson(1) weights (capped at 11) of `shape` from the generator `rng`."""
    r = rng.integers(0, 1 << 32, size=shape, dtype=np.uint32)
    bucket = r >> BUCKET_BITS
    weights = SECRET_BUCKET_WEIGHT[bucket]
    mixed = np.flatnonzero(SECRET_BUCKET_MIXED[bucket])
    if mixed.size:
        weights.flat[mixed] = np.searchsorted(SECRET_CUTS, r.flat[mixed].astype(np.uint64), side="right")
    return weights


def secret_site_products(entropy: int, reps: int, matrix: np.ndarray) -> np.ndarray:
    """(reps x k) replicate sums of a site's secret-seed bootstrap (`site export --secret-seed`): Poisson(1)
    weights (secret_weights) from numpy's PCG64 seeded by `entropy` (128 bits the site drew and keeps
    nowhere), POISSON_BLOCK replicates by POISSON_CHUNK clusters at a time (bounded memory). Not the hash of
    `poisson_weights`, whose seed counts modulo 2^31 - 1: about 2.1e9 seeds, few enough for a hub to try
    them all. The same entropy gives two analyses on identical clusters the same weights (paired arms)."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    g, k = matrix.shape
    rng = np.random.default_rng(entropy)
    out = np.zeros((reps, k), dtype=np.float64)
    for first in range(0, reps, POISSON_BLOCK):
        rows = min(POISSON_BLOCK, reps - first)
        for rank in range(0, g, POISSON_CHUNK):
            size = min(POISSON_CHUNK, g - rank)
            out[first : first + rows] += np.dot(secret_weights(rng, (rows, size)), matrix[rank : rank + size])
    return out


def site_runs(con, records_by_analysis: dict) -> dict[str, list[tuple[str, int, int]]]:
    """{analysis: [(site, first rank, clusters)] in site-name order} of the cluster_stats on `con`
    (sql/estimates/site_runs.sql); a cluster id that names no site (or not a site name), or no id after
    it, is one line naming the record's file and the cluster_id column."""
    from autheval.vocabulary import name_problem
    from warehouse import sql

    out: dict[str, list[tuple[str, int, int]]] = {}
    for row in sql.rows(con, "estimates/site_runs"):
        analysis = row["analysis"]
        if row["site"] is None:
            records = records_by_analysis.get(analysis)
            raise RecordError(
                records.source if records is not None else analysis,
                "cluster_id",
                f"the {SITE_SCHEME} scheme weights each site's clusters by the site's own stream: every "
                f"cluster_id must be <site>{SITE_SEPARATOR}<id> (a site name, then '{SITE_SEPARATOR}'); "
                f"{row['n_clusters']:,} clusters name no site",
                f"cluster {row['example']!r}",
            )
        source = records_by_analysis[analysis].source if analysis in records_by_analysis else analysis
        problem = name_problem(row["site"])  # the rule of every name, `site export --site`'s too: not `all`
        if problem:
            raise RecordError(source, "cluster_id", f"the site name {problem}", f"cluster {row['example']!r}")
        if row["empty_id"] is not None:
            raise RecordError(
                source,
                "cluster_id",
                f"must be <site>{SITE_SEPARATOR}<id> with an id after the '{SITE_SEPARATOR}'",
                f"cluster {row['empty_id']!r}",
            )
        if row["last_rank"] - row["first_rank"] + 1 != row["n_clusters"]:  # byte order keeps a prefix's ids together
            raise AssertionError(f"site {row['site']!r} of {analysis!r}: its clusters are not one run of ranks")
        out.setdefault(analysis, []).append((row["site"], int(row["first_rank"]), int(row["n_clusters"])))
    for runs in out.values():
        runs.sort(key=lambda run: run[0])
    return out
