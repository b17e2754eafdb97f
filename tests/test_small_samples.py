"""Honest small samples (issue 28, section 4): few clusters are flagged (a `warning` column and one line on
stderr), the delta method uses Student t quantiles with G - 1 degrees of freedom, no p-value is below the
exact sign-flip floor 2^(1 - G) of the clusters that carry it, and an intervention rate whose interval
would be a point gets the exact Clopper-Pearson interval. The published study is untouched
(tests/test_parity.py)."""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest

from autheval.estimation.analytic import delta_method_rows
from autheval.estimation.estimators import estimate
from autheval.records.read import read_records
from tests.conftest import read_csv_rows, run_cli

HEADER = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"


def write_log(path, rows):
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def quiet_estimate(recordsets, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimate(recordsets, **kwargs)


def by_key(rows):
    return {(r["unit"], r["metric"]): r for r in rows}


@pytest.fixture
def one_changed_cluster(tmp_path):
    """4 rows in 3 clusters; the only changes are in cluster k1 (the issue's 'changes in 1 cluster')."""
    return read_records(
        write_log(
            tmp_path / "one_changed.csv",
            ["a,k1,a2,a1,-1.0,-0.7", "b,k1,a2,a1,-0.5,-0.3", "c,k2,a1,a1,-1.0,-1.0", "d,k3,a0,a0,0.0,0.0"],
        )
    )


@pytest.fixture
def three_clusters(tmp_path):
    """3 clusters, every one with a positive gap: no test over 3 clusters can give p < 0.25."""
    rows = [f"c{i},k{i % 3},a2,a1,-1.0,{-1.0 + 0.1 * (1 + i)}" for i in range(9)]
    return read_records(write_log(tmp_path / "three.csv", rows))


# --- the exact tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("df", [0.5, 1, 1.5, 2, 3, 4, 9, 19, 49, 99, 999, 1000, 2089, 10**5, 10**7])
def test_t_quantiles_agree_with_scipy(df):
    from autheval.estimation.exact import t_quantile

    stats = pytest.importorskip("scipy.stats")
    for q in (1e-6, 0.001, 0.025, 0.05, 0.3, 0.5, 0.7, 0.95, 0.975, 0.999, 1 - 1e-6):
        assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-12, abs=1e-14), q
    with pytest.raises(ValueError):
        t_quantile(0.0, df)
    with pytest.raises(ValueError):
        t_quantile(0.5, 0)


@pytest.mark.parametrize("k, n", [(0, 615), (0, 3), (615, 615), (1, 4), (3, 10), (2.5, 7), (100, 615), (614, 615)])
def test_clopper_pearson_agrees_with_scipy_beta_quantiles(k, n):
    from autheval.estimation.exact import clopper_pearson

    stats = pytest.importorskip("scipy.stats")
    lo, hi = clopper_pearson(k, n, (0.025, 0.975))
    assert lo == pytest.approx(stats.beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0, rel=1e-12, abs=1e-15)
    assert hi == pytest.approx(stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0, rel=1e-12, abs=1e-15)


def test_sign_flip_floor():
    from autheval.estimation.exact import sign_flip_floor

    assert [sign_flip_floor(g) for g in (0, 1, 2, 3, 10)] == [1.0, 1.0, 0.5, 0.25, 2.0**-9]


# --- the cases -----------------------------------------------------------------------------------


def test_changes_in_one_cluster_give_no_point_interval_and_no_small_p(one_changed_cluster):
    """Today: delta's delta-method interval is a point and the bootstrap's p-value 0.0016."""
    rows = by_key(delta_method_rows([one_changed_cluster]))
    delta = rows[("image_weighted", "delta")]
    assert delta["estimate"] == pytest.approx(0.25)
    assert delta["ci_lower"] is None and delta["ci_upper"] is None and delta["std_error"] is None
    assert "1 clusters with a changed action" in delta["warning"] and delta["support_clusters"] == 1
    result = quiet_estimate([one_changed_cluster], scheme="evaluator", reps=2000)
    for unit in ("image_weighted", "cluster_equal"):
        for metric in ("delta", "Delta_authority"):
            row = result.estimate(one_changed_cluster.analysis, unit, metric)
            assert row["p_value"] == 1.0, (unit, metric)  # a sign flip over one cluster: no test at all
            assert row["support_clusters"] == 1 and row["warning"].startswith("few clusters: 1 ")


@pytest.mark.parametrize("scheme", ["reference", "evaluator", "poisson"])
def test_three_clusters_never_give_a_p_value_below_a_quarter(three_clusters, scheme):
    result = quiet_estimate([three_clusters], scheme=scheme, reps=2000)
    for unit in ("image_weighted", "cluster_equal"):
        row = result.estimate(three_clusters.analysis, unit, "Delta_authority")
        assert row["estimate"] > 0 and row["p_value"] >= 0.25, row


def test_no_change_gives_the_exact_interval_of_p(tmp_path):
    """615 rows, nothing changed: p in [0, 0.006] (Clopper-Pearson), not [0, 0], by every method."""
    rows = [f"c{i},k{i % 41},a1,a1,-1.0,-1.0" for i in range(615)]
    records = read_records(write_log(tmp_path / "none.csv", rows))
    upper = 1 - 0.025 ** (1 / 615)
    assert upper == pytest.approx(0.00598, abs=1e-5)
    for scheme in ("reference", "evaluator"):
        image = quiet_estimate([records], scheme=scheme, reps=1000).estimate(
            records.analysis, "image_weighted", "intervention_rate"
        )
        assert image["estimate"] == 0.0 and image["ci_lower"] == 0.0
        assert image["ci_upper"] == pytest.approx(upper, rel=1e-12)
        assert image["interval_method"] == "clopper_pearson"
    delta = by_key(delta_method_rows([records]))
    assert delta[("image_weighted", "intervention_rate")]["ci_upper"] == pytest.approx(upper, rel=1e-12)
    assert delta[("cluster_equal", "intervention_rate")]["ci_upper"] == pytest.approx(1 - 0.025 ** (1 / 41))


def test_everything_changed_gives_the_exact_lower_end(tmp_path):
    rows = [f"c{i},k{i % 40},a2,a1,-1.0,-0.5" for i in range(80)]
    records = read_records(write_log(tmp_path / "all.csv", rows))
    row = quiet_estimate([records], scheme="evaluator", reps=1000).estimate(
        records.analysis, "image_weighted", "intervention_rate"
    )
    assert row["ci_upper"] == 1.0 and row["ci_lower"] == pytest.approx(0.025 ** (1 / 80), rel=1e-12)


@pytest.mark.parametrize("clusters", [3, 5, 12])
def test_the_delta_method_uses_t_with_g_minus_1_degrees_of_freedom(tmp_path, clusters):
    stats = pytest.importorskip("scipy.stats")
    rows = [
        f"c{i},k{i % clusters},{'a2' if i % 2 else 'a1'},a1,{-1.0 - (i % 5) / 7},"
        + (f"{-1.0 + (i % 3) / 5}" if i % 2 else f"{-1.0 - (i % 5) / 7}")
        for i in range(40)
    ]
    records = read_records(write_log(tmp_path / "t.csv", rows))
    for row in delta_method_rows([records], quantiles=(0.05, 0.95)):
        if row["std_error"] and row["metric"] in ("J", "Delta_authority"):
            half = (row["ci_upper"] - row["estimate"]) / row["std_error"]
            assert half == pytest.approx(stats.t.ppf(0.95, clusters - 1), rel=1e-10), row


# --- the outputs: a warning column, a line on stderr --------------------------------------------------


def test_evaluate_warns_on_stderr_and_in_estimates_csv(tmp_path, three_clusters):
    out = tmp_path / "out"
    result = run_cli("evaluate", "--input", three_clusters.source, "--output-dir", str(out), "--reps", "1000")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "few clusters" in line]
    assert len(lines) == 1 and lines[0].startswith("autheval: warning: ")
    assert "3 clusters, 3 with a changed action; the threshold is 30" in lines[0]
    rows = {(r["unit"], r["metric"]): r for r in read_csv_rows(out / "estimates.csv")}
    assert rows[("image_weighted", "J")]["support_clusters"] == "3"
    assert rows[("image_weighted", "J")]["warning"].startswith("few clusters: 3 clusters (fewer than 30)")
    assert rows[("image_weighted", "J_std")]["warning"] == ""  # not supplied: nothing to flag


def test_compare_floors_the_contrast_p_value(tmp_path):
    a = write_log(tmp_path / "a.csv", [f"c{i},k{i % 3},a2,a1,-1.0,{-0.5 + 0.1 * i}" for i in range(9)])
    b = write_log(tmp_path / "b.csv", [f"c{i},k{i % 3},a1,a1,-1.0,-1.0" for i in range(9)])
    out = tmp_path / "out"
    result = run_cli("compare", "--arm", f"A={a}", "--arm", f"B={b}", "--reps", "2000", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    rows = read_csv_rows(out / "paired_contrast.csv")
    assert [r["contrast"] for r in rows] == ["B minus A", "B minus A"]
    assert all(float(r["p_value"]) >= 0.25 and float(r["difference"]) < 0 for r in rows), rows
    assert any("A: few clusters" in line for line in result.stderr.splitlines())


def test_enough_clusters_leave_the_warning_empty(tmp_path):
    rows = [f"c{i},k{i % 30},a2,a1,-1.0,{-0.5 + (i % 7) / 10}" for i in range(60)]
    records = read_records(write_log(tmp_path / "many.csv", rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = estimate([records], scheme="evaluator", reps=1000)
    assert all(r["warning"] is None and r["support_clusters"] == 30 for r in result.estimates if r["available"])


def test_cluster_support_is_the_same_on_another_engine(one_changed_cluster, three_clusters):
    """sql/estimates/cluster_support.sql is portable: through Ibis it gives the in-process numbers."""
    from autheval.estimation.estimators import cluster_support
    from autheval.records.cluster_stats import register_cluster_stats
    from warehouse.engine import connect_engine
    from warehouse.sql import connect

    one = read_records(one_changed_cluster.source, analysis="one")
    three = read_records(three_clusters.source, analysis="three")
    con = connect()
    register_cluster_stats(con, [one, three])
    local = cluster_support(con)
    assert local == {"one": (3, 1), "three": (3, 3)}
    stats = con.table("cluster_stats").arrow()
    stats = stats.read_all() if hasattr(stats, "read_all") else stats
    with connect_engine("duckdb") as engine:
        engine.register("cluster_stats", pa.table(stats))
        remote = {
            r["analysis"]: (r["n_clusters"], r["changed_clusters"])
            for r in engine.read("estimates/cluster_support").to_pylist()
        }
    assert remote == local


# --- the coverage benchmark, a small fast case ------------------------------------------------------------


def test_coverage_benchmark_small_case():
    """benchmarks/small_sample_coverage.py at G = 5, 12 data sets: the t interval holds the normal one, so
    its coverage is never lower; the tables print one row per metric."""
    from benchmarks.small_sample_coverage import METRICS, run, table

    out = run(5, sims=12, reps=200, gap=0.25, batch=12)
    for metric, unit in METRICS:
        normal = out["covered"][(metric, unit, "delta_normal")]
        t = out["covered"][(metric, unit, "delta_t")]
        assert len(t) == 12 and all(b >= a for a, b in zip(normal, t))
    assert all(p >= 2.0**-4 for p in out["p_values"]["image_weighted"])  # the sign-flip floor over 5 clusters
    lines = table({5: out})
    assert len(lines) == 2 + len(METRICS) and "±" in lines[2]
