"""Coverage of the pooled bootstrap interval when every site keeps a secret seed (issue 29): how often the
nominal 95% interval of Delta_authority, pooled at a hub from sites that each weighted their own clusters
by a seed of their own (`site export --secret-seed`, scheme poisson_by_site_secret), contains the true
value, with its Monte Carlo standard error, in both units.

The model (known truth): S sites with fixed site effects mu_s = GAP + N(0, tau) (tau = 0: sites alike;
tau > 0: sites disagree, a fixed property of the sites, not resampled); per site G_s clusters, sizes
1 + Poisson(4); per case a change with probability 0.3 and, on a changed case, a gap of mean mu_s
(right-skewed: 0.5 (Exp(1) - 1) around it) plus a cluster effect N(0, 0.5). The estimand is the
pooled Delta_authority of these sites: 0.3 * sum_s G_s mu_s / sum_s G_s in both units (sizes and
changes are independent of the gaps).

Each simulated data set is one per-cluster statistics matrix per site (the image-unit sums and the
cluster-unit means of sql/records/cluster_matrix.sql, the columns Delta_authority reads); each site's
replicate sums are `autheval.estimation.by_site.secret_site_products` under a secret seed of its own
(128 bits drawn by `autheval.sites.export.secret_entropy`, as `site export --secret-seed` does), the hub adds them
with `autheval.estimation.by_site.sum_over_sites` and takes the percentile interval of the replicate
ratios (numpy's linear quantile, DuckDB's quantile_cont of sql/estimates/intervals.sql). The exports'
files and their checks are left out here (tests/test_sites.py covers them): this measures the scheme.

Usage: python benchmarks/sites_coverage.py [--sims 1000] [--reps 1000]
       [--designs 3x20,3x200,10x20,10x200,5x20-200] [--tau 0,0.2]
Figures: docs/sites.md, "Coverage with secret seeds".
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np

GAP, RATE, CLUSTER_SD = 0.4, 0.3, 0.5
UNITS = ("image_weighted", "cluster_equal")
DESIGNS = "3x20,3x200,10x20,10x200,5x20-200"


def design_sizes(text: str, rng: np.random.Generator) -> list[int]:
    """'SxG' (S sites of G clusters) or 'SxA-B' (S sites, each of a cluster count drawn from A..B, fixed)."""
    sites, _, clusters = text.partition("x")
    low, _, high = clusters.partition("-")
    if not high:
        return [int(low)] * int(sites)
    return [int(g) for g in rng.integers(int(low), int(high) + 1, int(sites))]


def site_matrix(rng: np.random.Generator, clusters: int, mu: float) -> np.ndarray:
    """(clusters x 4): n, the cluster's gap sum, 1 and its mean gap (w_n, w_gap, c_n, c_gap's columns)."""
    sizes = 1 + rng.poisson(4.0, clusters)
    cluster = np.repeat(np.arange(clusters), sizes)
    changed = rng.random(cluster.size) < RATE
    effect = rng.normal(0.0, CLUSTER_SD, clusters)
    gaps = np.where(changed, mu + 0.5 * (rng.exponential(1.0, cluster.size) - 1.0) + effect[cluster], 0.0)
    gap_sums = np.bincount(cluster, weights=gaps, minlength=clusters)
    n = sizes.astype(np.float64)
    return np.column_stack([n, gap_sums, np.ones(clusters), gap_sums / n])


def site_effects(sizes: list[int], tau: float, rng: np.random.Generator) -> np.ndarray:
    """Each site's mean gap mu_s = GAP + N(0, tau), drawn once: a fixed property of the sites."""
    return GAP + rng.normal(0.0, tau, len(sizes)) if tau > 0 else np.full(len(sizes), GAP)


def coverage(
    sizes: list[int],
    mu: np.ndarray,
    sims: int,
    reps: int,
    rng: np.random.Generator,
    seeds: Callable[[], int] | None = None,
    quantiles: tuple[float, float] = (0.025, 0.975),
) -> dict[str, tuple[float, float]]:
    """{unit: (coverage, Monte Carlo SE)} of the pooled secret-seed interval of Delta_authority over
    `sims` data sets of sites with `sizes` clusters and mean gaps `mu` (site_effects). `seeds`: each site's secret
    seed per data set (default: the operating system's random source, as `site export --secret-seed`)."""
    from autheval.estimation.bootstrap import one_blas_thread
    from autheval.estimation.by_site import secret_site_products, sum_over_sites
    from autheval.sites.export import secret_entropy

    seeds = seeds or secret_entropy
    truth = RATE * float(np.dot(sizes, mu) / sum(sizes))
    covered = dict.fromkeys(UNITS, 0)
    with one_blas_thread():
        for _ in range(sims):
            matrices = [site_matrix(rng, g, m) for g, m in zip(sizes, mu)]
            sums = sum_over_sites(secret_site_products(seeds(), reps, m) for m in matrices)
            for unit, (num, den) in zip(UNITS, ((1, 0), (3, 2))):
                ratios = sums[:, num] / sums[:, den]
                lo, hi = np.quantile(ratios[np.isfinite(ratios)], quantiles)
                covered[unit] += bool(lo <= truth <= hi)
    out = {}
    for unit, hits in covered.items():
        c = hits / sims
        out[unit] = (c, math.sqrt(c * (1 - c) / sims))
    return out


def main() -> int:
    from benchmarks.peer import machine_line

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--designs", default=DESIGNS, help="sites x clusters per site, comma separated")
    parser.add_argument("--tau", default="0,0.2", help="SDs of the fixed site effects, comma separated")
    parser.add_argument("--seed", type=int, default=20260529, help="the simulation's seed (the sites' are secret)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(machine_line())
    print(
        f"pooled poisson_by_site_secret interval of Delta_authority, nominal 95%, {args.sims} data sets, "
        f"{args.reps} replicates"
    )
    print("| sites x clusters | tau | image_weighted | cluster_equal | seconds |")
    print("|---|---|---|---|---|")
    for design in args.designs.split(","):
        sizes = design_sizes(design, rng)
        for tau in (float(t) for t in args.tau.split(",")):
            started = time.perf_counter()
            result = coverage(sizes, site_effects(sizes, tau, rng), args.sims, args.reps, rng)
            cells = " | ".join(f"{c:.3f} ({se:.3f})" for c, se in (result[u] for u in UNITS))
            label = design if "-" not in design else f"{design} ({', '.join(map(str, sizes))})"
            print(f"| {label} | {tau:g} | {cells} | {time.perf_counter() - started:.0f} |", flush=True)
    print(machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
