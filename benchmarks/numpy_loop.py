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
