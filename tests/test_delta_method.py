"""Delta-method intervals (sql/estimates/delta_method.sql, autheval/estimation/analytic.py): pinned by an independent
numpy linearisation over clusters, masked by the record level like the bootstrap, and close to the reference
bootstrap on the published traces (the README's side-by-side table)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from autheval.estimation.analytic import (
    DELTA_METHOD,
    INTERVAL_METHODS,
    bootstrap_method,
    delta_method_rows,
    interval_table,
    side_by_side,
)
from autheval.estimation.estimators import METRICS, UNITS, estimate
from autheval.records.read import read_records
from autheval.vocabulary import SCHEMES, SITE_KEYED_SCHEMES
from tests.conftest import reference_file

Z = NormalDist().inv_cdf(0.975)


def t975(df: int) -> float:
    """Student t's 97.5% quantile, from scipy (an oracle independent of autheval.estimation.exact)."""
    stats = pytest.importorskip("scipy.stats")
    return float(stats.t.ppf(0.975, df))


def numpy_delta_method(records) -> dict:
    """(unit, metric) -> (estimate, std_error, clusters behind its degrees of freedom): ratios of cluster
    sums, linearised over clusters."""
    t = records.table
    _, cluster = np.unique(
        np.asarray(t.column("cluster_id").to_pylist(), dtype=object).astype(str), return_inverse=True
    )
    g = cluster.max() + 1

    def sums(values):
        return np.bincount(cluster, weights=values, minlength=g)

    def column(name):
        return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=float)

    n = sums(np.ones(len(cluster)))
    changed = sums(column("intervened"))
    exe, prop, glob = (
        column("utility_executed_local"),
        column("utility_proposed_local"),
        column("utility_proposed_global"),
    )
    values = {
        "J": sums(exe),
        "intervention_rate": changed,
        "J_auth": sums(prop),
        "Delta_authority": sums(prop - exe),
        "J_std": sums(glob),
        "Delta_total": sums(glob - exe),
        "Delta_utility": sums(glob - prop),
    }
    out = {}
    for unit in UNITS:
        for metric in METRICS:
            if metric == "delta":
                y, x = values["Delta_authority"], changed
            else:
                y, x = values[metric], n
            if unit == "cluster_equal":
                y, x = y / n, x / n
            ratio = y.sum() / x.sum()
            se = math.sqrt(g / (g - 1) * np.sum((y - ratio * x) ** 2)) / abs(x.sum())
            out[(unit, metric)] = (ratio, se, int((changed > 0).sum()) if metric == "delta" else g)
    return out


@pytest.fixture(scope="module")
def llava():
    return read_records(reference_file("trace_llava_med_head"), analysis="LLaVA-Med head")


def test_delta_method_equals_an_independent_numpy_linearisation(llava):
    expected = numpy_delta_method(llava)
    rows = delta_method_rows([llava])
    assert len(rows) == len(UNITS) * len(METRICS)
    for row in rows:
        ratio, se, clusters = expected[(row["unit"], row["metric"])]
        assert row["interval_method"] == DELTA_METHOD and row["available"]
        assert row["estimate"] == pytest.approx(ratio, rel=1e-12, abs=1e-14)
        assert row["std_error"] == pytest.approx(se, rel=1e-10)
        t = t975(clusters - 1)  # Student t with G - 1 degrees of freedom (docs/evaluating.md, "Few clusters")
        assert row["ci_lower"] == pytest.approx(ratio - t * se, rel=1e-10, abs=1e-14)
        assert row["ci_upper"] == pytest.approx(ratio + t * se, rel=1e-10, abs=1e-14)
        assert row["n_clusters"] == 2090


@pytest.mark.parametrize("scheme", ["reference", "evaluator", "poisson"])
def test_delta_method_estimates_are_the_bootstrap_point_estimates(llava, scheme):
    """Every scheme's points are one computation, and the delta method's are the same ratios."""
    result = estimate([llava], scheme=scheme, reps=200)
    for row in delta_method_rows([llava]):
        boot = result.estimate(row["analysis"], row["unit"], row["metric"])
        assert row["estimate"] == pytest.approx(boot["estimate"], rel=1e-12, abs=1e-15)


def test_other_levels_use_their_t_quantiles(llava):
    narrow = {(r["unit"], r["metric"]): r for r in delta_method_rows([llava], quantiles=(0.05, 0.95))}
    wide = {(r["unit"], r["metric"]): r for r in delta_method_rows([llava])}
    key = ("image_weighted", "Delta_authority")
    ratio = (narrow[key]["ci_upper"] - narrow[key]["estimate"]) / (wide[key]["ci_upper"] - wide[key]["estimate"])
    stats = pytest.importorskip("scipy.stats")
    assert ratio == pytest.approx(stats.t.ppf(0.95, 2089) / stats.t.ppf(0.975, 2089), rel=1e-12)
    normal = {(r["unit"], r["metric"]): r for r in delta_method_rows([llava], distribution="normal")}
    half = normal[key]["ci_upper"] - normal[key]["estimate"]
    assert half / (wide[key]["ci_upper"] - wide[key]["estimate"]) == pytest.approx(Z / t975(2089), rel=1e-12)
    with pytest.raises(ValueError):
        delta_method_rows([llava], quantiles=(0.0, 0.975))  # no finite quantile


def write_log(
    path,
    rows,
    header="case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local",
):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_unsupported_numbers_stay_unreported(tmp_path):
    """A role-separated log (no proposal score): p and J only, the rest not recoverable, as in the
    bootstrap; J_std is not supplied."""
    log = write_log(
        tmp_path / "role.csv",
        ["a,c1,x,y,1.0", "b,c1,x,x,2.0", "c,c2,x,x,0.5", "d,c3,y,x,1.5"],
        header="case_id,cluster_id,proposed_action,executed_action,utility_executed_local",
    )
    records = read_records(log)
    rows = {(r["unit"], r["metric"]): r for r in delta_method_rows([records])}
    for unit in UNITS:
        assert rows[(unit, "J")]["available"] and rows[(unit, "J")]["std_error"] > 0
        assert rows[(unit, "intervention_rate")]["available"]
        for metric in ("J_auth", "Delta_authority", "delta"):
            assert not rows[(unit, metric)]["available"]
            assert rows[(unit, metric)]["estimate"] is None and rows[(unit, metric)]["ci_lower"] is None
            assert rows[(unit, metric)]["status"] == "not_recoverable"
        assert rows[(unit, "J_std")]["status"] == "not_supplied"


def test_one_cluster_has_no_standard_error(tmp_path):
    log = write_log(tmp_path / "one.csv", ["a,c1,x,y,1.0,2.0", "b,c1,x,x,2.0,2.0"])
    rows = delta_method_rows([read_records(log)])
    for row in rows:
        if row["available"]:
            assert row["estimate"] is not None
            assert row["std_error"] is None and row["ci_lower"] is None and row["ci_upper"] is None


def test_no_change_leaves_delta_undefined_and_p_exact(tmp_path):
    """p = 0 has no sampling variance to linearise: its interval is the exact Clopper-Pearson one
    (over 3 cases, and over 3 clusters in the cluster-equal unit), not [0, 0]."""
    log = write_log(tmp_path / "same.csv", ["a,c1,x,x,1.0,1.0", "b,c2,x,x,2.0,2.0", "c,c3,y,y,0.5,0.5"])
    rows = {(r["unit"], r["metric"]): r for r in delta_method_rows([read_records(log)])}
    for unit in UNITS:
        assert rows[(unit, "delta")]["status"] == "undefined" and rows[(unit, "delta")]["estimate"] is None
        p = rows[(unit, "intervention_rate")]
        assert p["estimate"] == 0.0 and p["std_error"] == 0.0 and p["ci_lower"] == 0.0
        assert p["ci_upper"] == pytest.approx(1 - 0.025 ** (1 / 3), rel=1e-12)
        assert p["interval_method"] == "clopper_pearson"


def test_every_row_names_its_interval_method(llava):
    result = estimate([llava], scheme="poisson", reps=100)
    table = interval_table(result, delta_method_rows([llava]))
    methods = table.column("interval_method").to_pylist()
    assert set(methods) == {"bootstrap_poisson", DELTA_METHOD}
    assert methods.count(DELTA_METHOD) == methods.count("bootstrap_poisson") == len(UNITS) * len(METRICS)
    assert set(INTERVAL_METHODS) == {bootstrap_method(s) for s in (*SCHEMES, *SITE_KEYED_SCHEMES)} | {DELTA_METHOD}
    with pytest.raises(ValueError):
        bootstrap_method("jackknife")


def test_close_to_the_reference_bootstrap_on_the_published_traces():
    """The README's comparison, as a guard: on every reference trace, metric and unit the two 95%
    intervals have widths within 5% and ends within 6% of the bootstrap width of each other."""
    from autheval.reference_data import REFERENCE_ANALYSES

    recordsets = [read_records(reference_file(trace), analysis=name) for name, *_, trace in REFERENCE_ANALYSES]
    result = estimate(recordsets, scheme="reference")
    rows = side_by_side(result, delta_method_rows(recordsets))
    assert len(rows) == 3 * 10 + 3 * 16  # regimes: 5 metrics x 2 units; mechanisms with global scores: 8 x 2
    for row in rows:
        assert 0.95 <= row["width_ratio"] <= 1.05, row
        assert row["end_shift"] <= 0.06, row
    worst = max(rows, key=lambda r: r["end_shift"])
    assert (worst["analysis"], worst["unit"], worst["metric"]) == ("CLIP probe", "image_weighted", "Delta_utility")
