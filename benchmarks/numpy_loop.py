"""A straightforward numpy per-replicate loop of AuthEval's estimators (spec sections 6.2-6.5, 6.7).

Written independently of the SQL path, it is both the benchmark baseline and the tests' oracle.
"""

from __future__ import annotations

import csv

import numpy as np


def load_trace(path) -> dict:
    """Case trace (CSV, or the package's Parquet copy) -> per-cluster arrays in ascending cluster_id order."""
    if str(path).endswith(".parquet"):
        import pyarrow.parquet as pq

        rows = pq.read_table(path, columns=["cluster_id", "a_head", "a_exec", "Uz_head", "Uz_exec"]).to_pylist()
    else:
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
    clusters = sorted({r["cluster_id"] for r in rows})
    index = {c: i for i, c in enumerate(clusters)}
    g = len(clusters)
    stats = {k: np.zeros(g) for k in ("n", "A", "B", "K", "S")}
    for r in rows:
        i = index[r["cluster_id"]]
        head, execd = float(r["Uz_head"]), float(r["Uz_exec"])
        stats["n"][i] += 1
        stats["A"][i] += head
        stats["B"][i] += execd
        stats["K"][i] += r["a_head"] != r["a_exec"]
        stats["S"][i] += head - execd
    stats["clusters"] = clusters
    return stats


def reference_summary(stats: dict, reps: int = 5000, seed: int = 20260711, q=(0.025, 0.975)) -> dict:
    """Image-weighted metrics (ratio of sums) and the cluster-equal Delta, one shared stream."""
    n, a, b, k, s = (stats[x] for x in ("n", "A", "B", "K", "S"))
    g = len(n)
    out = {
        "J_auth": a.sum() / n.sum(),
        "J": b.sum() / n.sum(),
        "intervention_rate": k.sum() / n.sum(),
        "delta": s.sum() / k.sum() if k.sum() else np.nan,
        "Delta_authority": s.sum() / n.sum(),
        "Delta_authority_cluster": (s / n).mean(),
    }
    draws = {m: np.empty(reps) for m in ("J_auth", "J", "intervention_rate", "delta", "Delta_authority")}
    rng = np.random.default_rng(seed)
    for r in range(reps):
        idx = rng.integers(0, g, size=g)
        nn, kk, ss = n[idx].sum(), k[idx].sum(), s[idx].sum()
        draws["J_auth"][r] = a[idx].sum() / nn
        draws["J"][r] = b[idx].sum() / nn
        draws["intervention_rate"][r] = kk / nn
        draws["delta"][r] = ss / kk if kk else np.nan
        draws["Delta_authority"][r] = ss / nn
    for m, x in draws.items():
        out[f"{m}_ci_lower"], out[f"{m}_ci_upper"] = np.nanquantile(x, q)
    means = s / n
    rng = np.random.default_rng(seed)
    cluster = np.empty(reps)
    for r in range(reps):
        cluster[r] = means[rng.integers(0, g, size=g)].mean()
    out["Delta_authority_cluster_ci_lower"], out["Delta_authority_cluster_ci_upper"] = np.quantile(cluster, q)
    return out


def paired_contrast(high: dict, low: dict, reps: int = 5000, seed: int = 20260711, q=(0.025, 0.975)) -> dict:
    """'high minus low' Delta on identical clusters, both units, one stream."""
    n = high["n"]
    g = len(n)
    sh, sl = high["S"], low["S"]
    out = {
        "image_weighted": sh.sum() / n.sum() - sl.sum() / n.sum(),
        "cluster_equal": (sh / n).mean() - (sl / n).mean(),
    }
    image, cluster = np.empty(reps), np.empty(reps)
    rng = np.random.default_rng(seed)
    for r in range(reps):
        idx = rng.integers(0, g, size=g)
        nn = n[idx].sum()
        image[r] = sh[idx].sum() / nn - sl[idx].sum() / nn
        cluster[r] = (sh / n)[idx].mean() - (sl / n)[idx].mean()
    for unit, x in (("image_weighted", image), ("cluster_equal", cluster)):
        out[f"{unit}_ci"] = tuple(np.quantile(x, q))
    return out


# --- AuthEval's generic log evaluator (spec 6.7), the baseline of the `evaluator` scheme -------------

EVALUATOR_OFFSETS = {
    "J": 0,
    "intervention_rate": 1,
    "J_auth": 2,
    "Delta_authority": 3,
    "delta": 4,
    "J_std": 5,
    "Delta_total": 6,
    "Delta_utility": 7,
}


def read_log(path) -> dict:
    """A role-separated log (CSV or Parquet, the AuthEval log columns) as numpy arrays."""
    import pyarrow as pa

    if str(path).endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        from pyarrow import csv as pacsv

        text = {c: pa.string() for c in ("case_id", "cluster_id", "proposed_action", "executed_action")}
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=text))
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    if "cluster_id" not in cols:
        cols["cluster_id"] = cols["case_id"]
    return cols


def evaluator_summary(log: dict, reps: int = 5000, seed: int = 20260710, q=(0.025, 0.975)) -> dict:
    """metric -> (estimate, ci_lower, ci_upper) of AuthEval's generic evaluator, image-weighted: per metric
    its own generator default_rng(seed + offset), whole-cluster resamples of the clusters that carry the
    metric's cases (delta: intervened rows only), replicate by replicate, ratio of resampled sums over
    resampled case counts. Metrics the log cannot support are absent."""
    changed = log["proposed_action"].astype(str) != log["executed_action"].astype(str)
    execd = log["utility_executed_local"].astype(np.float64)
    local = log.get("utility_proposed_local")
    glob = log.get("utility_proposed_global")
    local = None if local is None else local.astype(np.float64)
    glob = None if glob is None else glob.astype(np.float64)
    values = {"J": (execd, None), "intervention_rate": (changed.astype(np.float64), None)}
    if local is not None:
        values["J_auth"] = (local, None)
        values["Delta_authority"] = (local - execd, None)
        if changed.any():
            values["delta"] = (local - execd, changed)
    elif not changed.any():
        values["Delta_authority"] = (np.zeros_like(execd), None)
    if glob is not None:
        values["J_std"] = (glob, None)
        values["Delta_total"] = (glob - execd, None)
        if local is not None:
            values["Delta_utility"] = (glob - local, None)
    clusters = log["cluster_id"].astype(str)
    out = {}
    for metric, (x, rows) in values.items():
        k = clusters if rows is None else clusters[rows]
        x = x if rows is None else x[rows]
        names, rank = np.unique(k, return_inverse=True)  # ascending cluster id
        g = len(names)
        sums = np.bincount(rank, weights=x, minlength=g)
        counts = np.bincount(rank, minlength=g)
        rng = np.random.default_rng(seed + EVALUATOR_OFFSETS[metric])
        draws = np.empty(reps)
        for r in range(reps):
            idx = rng.integers(0, g, size=g)
            draws[r] = sums[idx].sum() / counts[idx].sum()
        lo, hi = np.quantile(draws, q)
        out[metric] = (float(x.mean()), float(lo), float(hi))
    return out


def main(argv=None) -> int:
    """`python benchmarks/numpy_loop.py evaluate LOG [--reps N]`: the generic evaluator's numbers as JSON;
    `python benchmarks/numpy_loop.py traces NAME=PATH ... --contrast HIGH LOW`: the reference scheme
    on case traces and one paired contrast, as JSON (the whole-process baselines of the benchmarks)."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("evaluate")
    p.add_argument("log")
    p.add_argument("--reps", type=int, default=5000)
    p.add_argument("--seed", type=int, default=20260710)
    p = sub.add_parser("traces")
    p.add_argument("arms", nargs="+", metavar="NAME=PATH")
    p.add_argument("--contrast", nargs=2, metavar=("HIGH", "LOW"))
    args = parser.parse_args(argv)
    if args.command == "evaluate":
        result = evaluator_summary(read_log(args.log), reps=args.reps, seed=args.seed)
    else:
        stats = {name: load_trace(path) for name, path in (a.split("=", 1) for a in args.arms)}
        result = {"arms": {name: reference_summary(s) for name, s in stats.items()}}
        if args.contrast:
            high, low = args.contrast
            result["contrast"] = paired_contrast(stats[high], stats[low])
    json.dump(result, sys.stdout, default=float)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
