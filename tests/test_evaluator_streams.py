"""The `evaluator` scheme pinned by an independent numpy loop on a trace-sized log, and the replicate
streams of the exact schemes drawn in blocks.

AuthEval's generic evaluator (spec 6.7) resamples each metric with its own generator,
`default_rng(seed + offset)`, over its own clusters (delta: the clusters of intervened rows only). The
loop below knows nothing of the SQL: it reads the trace, builds per-case values, and draws
`integers(0, G, size=G)` per replicate, metric by metric. A swapped seed offset, a wrong cluster set or
a wrong metric formula moves an interval.

Point estimates are the same under every scheme: AuthEval's plain means in the image unit; in the
cluster unit the mean of cluster means, and for delta the cluster-equal Delta over the cluster-equal p.
The evaluator's cluster-equal delta interval is that ratio on delta's own stream (seed + 4, the
clusters of intervened rows): sum of drawn clusters' gap / n_c over sum of their changed / n_c.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from autheval.estimation.estimators import estimate
from autheval.records.read import read_records
from tests.conftest import reference_file

SEED = 20260710
OFFSETS = {
    "J": 0,
    "intervention_rate": 1,
    "J_auth": 2,
    "Delta_authority": 3,
    "delta": 4,
    "J_std": 5,
    "Delta_total": 6,
    "Delta_utility": 7,
}
REPS = 400
TOL = 1e-12


def read_trace(path) -> dict[str, np.ndarray]:
    if str(path).endswith(".csv"):
        table = pacsv.read_csv(
            path,
            convert_options=pacsv.ConvertOptions(
                column_types={
                    "image_id": pa.string(),
                    "cluster_id": pa.string(),
                    "a_head": pa.string(),
                    "a_exec": pa.string(),
                }
            ),
        )
    else:
        table = pq.read_table(path)
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    cols["changed"] = cols["a_head"].astype(str) != cols["a_exec"].astype(str)
    for c in ("Uz_head", "Uz_exec", "Ug_head"):
        cols[c] = cols[c].astype(np.float64)
    return cols


def case_values(t: dict[str, np.ndarray]) -> dict[str, tuple]:
    """metric -> (per-case values, cluster id of each case), delta on intervened rows only, with
    delta's cluster-unit terms: the case count of every intervened row's cluster, and the point, the
    cluster-equal Delta over the cluster-equal p (a case weighs 1 / its cluster's size)."""
    gap = t["Uz_head"] - t["Uz_exec"]
    k, ch = t["cluster_id"].astype(str), t["changed"]
    names, counts = np.unique(k, return_counts=True)
    size = counts[np.searchsorted(names, k)].astype(np.float64)
    return {
        "J": (t["Uz_exec"], k),
        "intervention_rate": (ch.astype(np.float64), k),
        "J_auth": (t["Uz_head"], k),
        "Delta_authority": (gap, k),
        "delta": (gap[ch], k[ch], size[ch], (gap / size).sum() / (ch / size).sum()),
        "J_std": (t["Ug_head"], k),
        "Delta_total": (t["Ug_head"] - t["Uz_exec"], k),
        "Delta_utility": (t["Ug_head"] - t["Uz_head"], k),
    }


def loop(
    values: np.ndarray, clusters: np.ndarray, sizes=None, cluster_point=None, *, seed: int, reps: int
) -> dict[str, tuple[float, float, float]]:
    """One metric of the generic evaluator, replicate by replicate; both units. With `sizes` (delta):
    the cluster unit is the drawn clusters' sum of values / n_c over their sum of changed / n_c."""
    names = sorted(set(clusters.tolist()))  # ascending cluster id
    index = {name: i for i, name in enumerate(names)}
    rank = np.array([index[c] for c in clusters])
    g = len(names)
    s = np.bincount(rank, weights=values, minlength=g)
    n = np.bincount(rank, minlength=g).astype(np.float64)
    if sizes is None:
        m, w = s / n, np.ones(g)
        cluster_point = m.mean()
    else:
        size = np.bincount(rank, weights=sizes, minlength=g) / n  # each cluster's case count
        m, w = s / size, n / size
    rng = np.random.default_rng(seed)
    image, cluster = np.empty(reps), np.empty(reps)
    for r in range(reps):
        idx = rng.integers(0, g, size=g)
        image[r] = s[idx].sum() / n[idx].sum()
        cluster[r] = m[idx].sum() / w[idx].sum()
    out = {}
    for unit, point, draws in (("image_weighted", values.mean(), image), ("cluster_equal", cluster_point, cluster)):
        lo, hi = np.quantile(draws, [0.025, 0.975])
        out[unit] = (float(point), float(lo), float(hi))
    return out


@pytest.fixture(scope="module")
def clip_probe():
    path = reference_file("trace_clip_probe")
    expected = {
        metric: loop(*v, seed=SEED + OFFSETS[metric], reps=REPS) for metric, v in case_values(read_trace(path)).items()
    }
    result = estimate([read_records(path, analysis="clip")], scheme="evaluator", reps=REPS)
    return expected, result


@pytest.mark.parametrize("metric", list(OFFSETS))
def test_evaluator_matches_a_numpy_loop_per_metric(clip_probe, metric):
    expected, result = clip_probe
    for unit in ("image_weighted", "cluster_equal"):
        row = result.estimate("clip", unit, metric)
        assert row["available"], (metric, unit)
        got = (row["estimate"], row["ci_lower"], row["ci_upper"])
        for a, b in zip(got, expected[metric][unit]):
            assert abs(a - b) <= TOL * max(1.0, abs(b)), (metric, unit, got, expected[metric][unit])


def test_each_metric_has_its_own_stream(clip_probe):
    """Guard against a test that would pass with shared streams: J_auth's and Delta's loops on the
    other's seed give different intervals on this trace."""
    expected, _ = clip_probe
    values = case_values(read_trace(reference_file("trace_clip_probe")))
    swapped = loop(*values["J_auth"], seed=SEED + OFFSETS["Delta_authority"], reps=REPS)
    assert swapped["image_weighted"][1:] != expected["J_auth"]["image_weighted"][1:]


@pytest.mark.parametrize("scheme", ["reference", "evaluator"])
def test_small_blocks_give_the_same_numbers(monkeypatch, scheme):
    """Replicates are streamed in blocks: tiny blocks (7 replicates, a 64-value buffer) give what one
    block gives, to the last bits BLAS may round differently."""
    import autheval.estimation.bootstrap as bootstrap

    arms = [read_records(reference_file(n), analysis=n) for n in ("trace_llava_med_head", "trace_clip_probe")]
    contrast = [("trace_clip_probe", "trace_llava_med_head")]
    whole = estimate(arms, scheme=scheme, reps=300, contrasts=contrast)
    monkeypatch.setattr(bootstrap, "REP_BLOCK", 7)
    monkeypatch.setattr(bootstrap, "BLOCK_VALUES", 64)
    blocked = estimate(arms, scheme=scheme, reps=300, contrasts=contrast)
    for x, y in zip(whole.estimates + whole.contrasts, blocked.estimates + blocked.contrasts):
        for key in ("estimate", "difference", "ci_lower", "ci_upper"):
            if key in x:
                assert (x[key] is None and y[key] is None) or abs(x[key] - y[key]) <= TOL * max(1.0, abs(x[key])), (
                    x,
                    y,
                )


def test_lockstep_blocks_bound_memory_and_keep_the_stream():
    from autheval.estimation.bootstrap import lockstep_blocks, replicate_products

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((50, 4)), rng.standard_normal((9, 2))
    blocks = list(lockstep_blocks([(11, a), (12, b)], reps=100, block_values=120))
    assert all(part.shape[0] <= 2 for _, parts in blocks for part in parts)  # 120 // (50 + 9) rows
    assert [start for start, _ in blocks] == list(range(0, 100, 2))
    for i, (seed, matrix) in enumerate([(11, a), (12, b)]):
        stacked = np.vstack([parts[i] for _, parts in blocks])
        assert np.allclose(stacked, replicate_products(seed, 100, matrix), rtol=0, atol=1e-12)
