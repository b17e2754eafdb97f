"""Tests that kill plausible one-line bugs in monitoring (issue 27): each formula against an independent
computation (numpy or a hand-worked number), never against the function itself, and each validation rule
at its edge. Every test names the bug it kills; each was seen red with that bug planted."""

from __future__ import annotations

import math
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from autheval.errors import RecordError
from autheval.estimation.multiplicity import add_adjusted_columns, alpha_of
from autheval.monitoring.landing import read_landed
from autheval.monitoring.monitor import adjusted_levels, confidence_sequences, monitor_table
from autheval.monitoring.notify import NotifyError, notify_new, send
from autheval.monitoring.protocol import parse_protocol
from autheval.records.schema import FULL, ROLE_SEPARATED
from warehouse.sql import connect, load_sql

# --- independent computations (numpy, the paper's formulas) ------------------------------------------


def rho2(alpha: float, t_star: int) -> float:
    return (-2 * np.log(alpha) + np.log(-2 * np.log(alpha) + 1)) / t_star


def radius(sigma: float, t: float, r2: float, alpha: float) -> float:
    return sigma * np.sqrt(2 * (t * r2 + 1) / (t**2 * r2) * np.log(np.sqrt(t * r2 + 1) / alpha))


def ratio_sigma(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """R = sum y / sum x and sigma = sqrt(sum psi^2 / (G - 1)), psi_c = (y_c - R x_c) / mean(x)."""
    r = y.sum() / x.sum()
    psi = (y - r * x) / x.mean()
    return r, float(np.sqrt((psi**2).sum() / (len(y) - 1)))


def holm_levels(p: list[float], alpha: list[float]) -> list[float]:
    """Holm's step-down levels with per-hypothesis alpha, by hand: order by p / alpha; step i has level
    alpha_i / (m - i + 1); from the first step whose p exceeds its level on, alpha_i / (m - stop + 1)."""
    m = len(p)
    order = sorted(range(m), key=lambda h: (p[h] / alpha[h], h))
    out, stop = [0.0] * m, None
    for i, h in enumerate(order, start=1):
        level = alpha[h] / (m - i + 1)
        if stop is None and p[h] > level:
            stop = i
        out[h] = level if stop is None else alpha[h] / (m - stop + 1)
    return out


def levels(p_values, alphas, method="holm"):
    m = len(p_values)
    looks = pa.table(
        {
            "hypothesis": pa.array(range(m), pa.int64()),
            "look": pa.array([1] * m, pa.int64()),
            "period": ["2026-01"] * m,
            "p_value": pa.array(p_values, pa.float64()),
            "alpha": pa.array(alphas, pa.float64()),
            "tested": [True] * m,
        }
    )
    return [r["alpha_adjusted"] for r in adjusted_levels(connect(threads=1), looks, method).to_pylist()]


def stats_table(clusters: list[tuple[float, float, float, float]]) -> pa.Table:
    """Per-cluster sums (n, changed, exec, gap) in sql/records/cluster_stats.sql's layout, analysis 'a'."""
    g = len(clusters)
    n, changed, exec_, gap = (list(c) for c in zip(*clusters))
    return pa.table(
        {
            "analysis": ["a"] * g,
            "cluster_id": [f"c{i}" for i in range(g)],
            "n": pa.array(n, pa.float64()),
            "sum_changed": pa.array(changed, pa.float64()),
            "sum_exec": pa.array(exec_, pa.float64()),
            "sum_prop": pa.array([e + d for e, d in zip(exec_, gap)], pa.float64()),
            "sum_gap": pa.array(gap, pa.float64()),
            **{k: pa.array([None] * g, pa.float64()) for k in ("sum_glob", "sum_total_gap", "sum_utility_gap")},
        }
    )


def p_values(stats: pa.Table, metric: str, lower=None, upper=None, alpha=0.05, horizon=100) -> dict:
    con = connect(threads=1)
    con.register("cluster_stats", stats)
    bounds = pa.table(
        {
            "rule": ["r"],
            "unit": ["image_weighted"],
            "metric": [metric],
            "lower": pa.array([lower], pa.float64()),
            "upper": pa.array([upper], pa.float64()),
        }
    )
    return confidence_sequences(con, "cluster_stats", alpha, horizon, bounds).to_pylist()[0]


# --- the anytime p-value ----------------------------------------------------------------------------


def test_the_p_value_is_capped_at_1_just_outside_a_bound():
    """Kills: the anytime p-value not capped at 1 (sqrt(t rho^2 + 1) exp(...) exceeds 1 near a bound)."""
    rng = np.random.default_rng(1)
    clusters = [(3.0, float(rng.integers(0, 4)), 0.0, 0.0) for _ in range(50)]
    row = p_values(stats_table(clusters), "intervention_rate", lower=None, upper=0.0)
    estimate = row["estimate"]
    row = p_values(stats_table(clusters), "intervention_rate", upper=estimate - 1e-9)
    t, r2 = 50.0, rho2(0.05, 100)
    uncapped = np.sqrt(t * r2 + 1) * np.exp(-(1e-9**2) * t**2 * r2 / (2 * row["sigma"] ** 2 * (t * r2 + 1)))
    assert uncapped > 1 and row["p_value"] == 1.0


def test_an_estimate_outside_its_bound_with_zero_spread_has_p_0():
    """Kills: an estimate outside its bound with zero spread getting p = 1 (or any p > 0)."""
    clusters = [(2.0, 1.0, 0.0, 0.0)] * 40  # every cluster changes half its images: sigma = 0 exactly
    row = p_values(stats_table(clusters), "intervention_rate", lower=0.6)
    assert row["estimate"] == 0.5 and row["sigma"] == 0.0 and row["p_value"] == 0.0
    inside = p_values(stats_table(clusters), "intervention_rate", lower=0.4)
    assert inside["p_value"] == 1.0


# --- Holm's levels --------------------------------------------------------------------------------------


def test_holm_orders_its_steps_by_p_over_alpha_when_a_site_has_its_own():
    """Kills: Holm's steps ordered by raw p instead of p / alpha."""
    p, alpha = [0.004, 0.003], [0.05, 0.01]  # by p / alpha: h0 (0.08) first; by raw p: h1 first
    expected = holm_levels(p, alpha)
    assert expected == pytest.approx([0.025, 0.01])
    assert levels(p, alpha) == pytest.approx(expected)
    rng = np.random.default_rng(11)
    for _ in range(40):
        m = int(rng.integers(2, 7))
        ps = list(rng.uniform(0, 0.03, size=m))
        alphas = list(rng.choice([0.01, 0.05, 0.1], size=m))
        assert levels(ps, alphas) == pytest.approx(holm_levels(ps, alphas)), (ps, alphas)


def test_holm_goes_on_past_a_p_equal_to_its_level():
    """Kills: Holm stopping at a p equal to its step's level (p > level stops; p = level is rejected)."""
    alpha = 0.05
    p = [alpha / 2, alpha]  # step 1's level is exactly alpha / 2, step 2's alpha
    assert holm_levels(p, [alpha] * 2) == [alpha / 2, alpha]
    assert levels(p, [alpha] * 2) == [alpha / 2, alpha]


# --- the monitor on landed logs ----------------------------------------------------------------------


def log_table(site, month, clusters, rng, version="v1", sizes=(1, 5), p_change=0.4, gap=0.0, start=0, local=True):
    rows = []
    for c in range(start, start + clusters):
        for i in range(int(rng.integers(*sizes))):
            a = int(rng.integers(0, 3))
            changed = bool(rng.random() < p_change)
            executed = float(rng.normal(0.0, 1.0))
            rows.append(
                {
                    "case_id": f"{site}-{month}-{c}-{i}",
                    "cluster_id": f"k{c}",
                    "proposed_action": f"a{a}",
                    "executed_action": f"a{a + 1 if changed else a}",
                    "utility_executed_local": executed,
                    "utility_proposed_local": (executed + float(rng.normal(gap, 0.5))) if changed else executed,
                    "timestamp": f"2026-{month:02d}-15",
                    "site": site,
                    "model_version": version,
                }
            )
    table = pa.Table.from_pylist(rows)
    if not local:  # role-separated: a changed case has no local score for the proposal
        prop = [None if r["proposed_action"] != r["executed_action"] else r["utility_proposed_local"] for r in rows]
        table = table.set_column(5, "utility_proposed_local", pa.array(prop, pa.float64()))
    return table


def land(tables, tmp_path) -> pa.Table:
    out = []
    for i, table in enumerate(tables):
        path = tmp_path / f"log{i}.csv"
        pacsv.write_csv(table, path)
        out.append(read_landed(path)[1])
    return pa.concat_tables(out)


METRICS = ("Delta_authority", "intervention_rate", "delta", "J", "J_auth")
UNITS = ("image_weighted", "cluster_equal")


def every_rule_protocol(alpha=0.05, horizon=200, min_clusters=10, sites="", multiplicity="none") -> str:
    rules = "".join(f"  - {{metric: {m}, unit: {u}, lower: -100}}\n" for m in METRICS for u in UNITS)
    return (
        f"version: p\nalpha: {alpha}\nhorizon_clusters: {horizon}\nmin_clusters: {min_clusters}\n"
        f"multiplicity: {multiplicity}\nrules:\n{rules}{sites}"
    )


def cluster_ratios(table: pa.Table) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(unit, metric) -> per-cluster (Y_c, X_c) by hand from the rows: image-weighted sums, cluster-equal
    means (delta's denominator the share changed), as sql/estimates/delta_method.sql defines them."""
    sums: dict[str, np.ndarray] = {}
    for row in table.to_pylist():
        s = sums.setdefault(row["cluster_id"], np.zeros(4))
        changed = row["proposed_action"] != row["executed_action"]
        s += [1.0, float(changed), row["utility_executed_local"], row["utility_proposed_local"]]
    n, ch, ex, pr = (np.array([v[k] for v in sums.values()]) for k in range(4))
    gp, one = pr - ex, np.ones(len(n))
    image = {"J": (ex, n), "intervention_rate": (ch, n), "J_auth": (pr, n), "Delta_authority": (gp, n)}
    image["delta"] = (gp, ch)
    out = {("image_weighted", m): yx for m, yx in image.items()}
    out.update({("cluster_equal", m): (y / n, one) for m, (y, _) in image.items() if m != "delta"})
    out[("cluster_equal", "delta")] = (gp / n, ch / n)
    return out


def test_the_monitored_confidence_sequence_of_every_metric_is_the_independent_one(tmp_path):
    """Kills: the monitored standard error of J_auth taken from J's cross moment; cluster-equal delta's
    cross moment taken as if every cluster had one case (and any other moment of any ratio mixed up):
    each look's estimate and CS against numpy over the look's clusters, lesions seen again included."""
    rng = np.random.default_rng(27)
    month1 = log_table("A", 1, 30, rng, gap=-0.3)
    month2 = log_table("A", 2, 30, rng, gap=-0.3, start=20)  # clusters k20..k29 seen again
    landed = land([month1, month2], tmp_path)
    protocol = parse_protocol(every_rule_protocol())
    rows = monitor_table(landed, protocol, reps=0).table.to_pylist()
    got = {(r["look"], r["unit"], r["metric"]): r for r in rows if (r["site"], r["model_version"]) == ("A", "v1")}
    uppers: dict = {}  # the running intersection's upper end: the least upper end of the looks to date
    for look, data in ((1, month1), (2, pa.concat_tables([month1, month2]))):
        for (unit, metric), (y, x) in cluster_ratios(data).items():
            r, sigma = ratio_sigma(y, x)
            half = radius(sigma, len(y), rho2(0.05, 200), 0.05)
            row = got[(look, unit, metric)]
            assert row["n_clusters"] == len(y)
            assert row["estimate"] == pytest.approx(r, rel=1e-9, abs=1e-12), (look, unit, metric)
            uppers[(unit, metric)] = min(uppers.get((unit, metric), math.inf), r + half)
            assert row["cs_upper"] == pytest.approx(uppers[(unit, metric)], rel=1e-7), (look, unit, metric)


def test_a_look_with_exactly_min_clusters_is_decided(tmp_path):
    """Kills: a look with exactly `min_clusters` clusters left undecided (`<=` for `<`, in the status SQL,
    the p-value's decidability or the reason)."""
    rng = np.random.default_rng(3)
    landed = land([log_table("A", 1, 40, rng, sizes=(2, 4), p_change=0.5)], tmp_path)
    text = (
        "version: p\nalpha: 0.05\nhorizon_clusters: 40\nmin_clusters: 40\nmultiplicity: none\nrules:\n"
        "  - {metric: intervention_rate, unit: image_weighted, lower: 0.9}\n"
    )
    (row,) = [r for r in monitor_table(landed, parse_protocol(text), reps=0).table.to_pylist() if r["site"] == "A"][:1]
    assert row["n_clusters"] == 40 and row["status"] == "alert"
    assert row["p_value"] is not None and row["p_value"] < 0.05 and "fewer than" not in row["reason"]
    fewer = text.replace("min_clusters: 40", "min_clusters: 41")
    (row,) = [r for r in monitor_table(landed, parse_protocol(fewer), reps=0).table.to_pylist() if r["site"] == "A"][:1]
    assert row["status"] == "insufficient" and "fewer than the protocol's min_clusters 41" in row["reason"]


def test_a_sites_own_alpha_decides_its_looks(tmp_path):
    """Kills: a site's own alpha ignored (in its settings, its boundary's rho^2 or its level)."""
    rng = np.random.default_rng(8)
    data = log_table("A", 1, 40, rng)
    landed = land([data], tmp_path)
    protocol = parse_protocol(every_rule_protocol(sites="sites:\n  A: {alpha: 0.01}\n"))
    assert protocol.settings("A")[0] == 0.01 and protocol.settings("B")[0] == 0.05
    rows = monitor_table(landed, protocol, reps=0).table.to_pylist()
    row = next(
        r for r in rows if (r["site"], r["model_version"], r["metric"], r["unit"]) == ("A", "v1", "J", "image_weighted")
    )
    assert row["alpha"] == 0.01 and row["alpha_adjusted"] == 0.01
    r, sigma = ratio_sigma(*cluster_ratios(data)[("image_weighted", "J")])
    assert row["cs_upper"] - row["estimate"] == pytest.approx(radius(sigma, 40, rho2(0.01, 200), 0.01), rel=1e-7)
    pooled = next(
        r
        for r in rows
        if (r["site"], r["model_version"], r["metric"], r["unit"]) == ("all", "all", "J", "image_weighted")
    )
    assert pooled["alpha"] == 0.01  # one cell: the pooled slices are its rows


def test_a_look_is_role_separated_when_only_unchanged_rows_carry_local_scores(tmp_path):
    """Kills: a look called full-counterfactual when only unchanged rows carry local scores (the level
    rule, or the count of changed cases with a local score)."""
    from autheval.monitoring.monitor import _look_level

    counts = {"n_executed": 10, "n_changed": 4, "n_changed_local": 0, "n_local": 6}
    assert _look_level(counts) == (ROLE_SEPARATED, False)
    assert _look_level({**counts, "n_changed_local": 4}) == (FULL, True)
    assert _look_level({**counts, "n_changed": 0, "n_changed_local": 0}) == (FULL, True)
    rows = []  # each lesion: one changed case (no local score for the proposal), one unchanged case
    for c in range(40):
        for i, (proposed, executed, local) in enumerate((("a1", "a2", None), ("a1", "a1", -0.5))):
            rows.append(
                {
                    "case_id": f"c{c}-{i}",
                    "cluster_id": f"k{c}",
                    "proposed_action": proposed,
                    "executed_action": executed,
                    "utility_executed_local": -0.5 + 0.01 * c,
                    "utility_proposed_local": None if local is None else -0.5 + 0.01 * c,
                    "timestamp": "2026-01-15",
                    "site": "A",
                    "model_version": "v1",
                }
            )
    role = pa.Table.from_pylist(rows)  # as many unchanged rows with local scores as changed rows without
    text = every_rule_protocol()
    rows = monitor_table(land([role], tmp_path), parse_protocol(text), reps=0).table.to_pylist()
    j_auth = [r for r in rows if r["metric"] == "J_auth" and r["model_version"] == "v1"]
    assert j_auth and all(r["estimate"] is None and "J_auth is not available" in r["reason"] for r in j_auth)


# --- the case mix ---------------------------------------------------------------------------------------


def test_the_case_mix_bonferroni_is_over_sites_times_dimensions(tmp_path):
    """Kills: the case-mix Bonferroni over dimensions only, not sites x dimensions."""
    rng = np.random.default_rng(6)
    tables = [log_table(site, month, 15, rng) for site in ("A", "B") for month in (1, 2, 3)]
    case_mix = monitor_table(land(tables, tmp_path), parse_protocol(every_rule_protocol()), reps=0).case_mix
    tests = {(r["site"], r["dimension"]) for r in case_mix.to_pylist()}
    dimensions = {d for _, d in tests}
    assert len(tests) == 2 * len(dimensions) == 6  # proposed_action, workflow_profile, record_level at 2 sites
    assert set(case_mix.column("alpha").to_pylist()) == {0.05 / 6}


def test_a_cluster_id_used_at_two_sites_counts_at_each(tmp_path):
    """Kills: a cluster id used at two sites counted at one (the case mix's first case per cluster)."""
    rng = np.random.default_rng(9)
    a, b = log_table("A", 1, 10, rng), log_table("B", 1, 10, rng)  # both name their lesions k0..k9
    con = connect()
    con.register("landed_records", land([a, b], tmp_path))
    counts = {}
    for r in (
        con.execute(load_sql("recurring/monitor_case_mix_counts"), {"baseline_periods": 2})
        .arrow()
        .read_all()
        .to_pylist()
    ):
        if r["dimension"] == "proposed_action":
            counts[r["site"]] = counts.get(r["site"], 0) + r["count"]
    assert counts == {"A": 10, "B": 10}


# --- the protocol's validation, at each rule's edge -------------------------------------------------------

BASE = """\
version: p
alpha: 0.05
horizon_clusters: 500
min_clusters: 20
rules:
  - {metric: Delta_authority, unit: cluster_equal, lower: -0.10}
"""


@pytest.mark.parametrize(
    "text, key",
    [
        (BASE + "sites:\n  A: {rules: []}\n", "sites.A.rules"),
        (
            BASE + "case_mix_reference:\n  risk_stratum: {very_low: 0.4, low: 0.3, moderate: 0.2, high: 0.099}\n",
            "risk_stratum",
        ),
        (BASE + "case_mix_reference:\n  risk_stratum: {very_low: 0.5, low: 0.5, moderate: 0.0}\n", "moderate"),
        (BASE + "baseline_periods: 0\n", "baseline_periods"),
        (BASE + "  - {metric: Delta_authority, unit: cluster_equal, upper: 0.5}\n", "rules[1]"),
        (
            BASE + "sites:\n  A:\n    rules:\n      - {metric: J, unit: image_weighted, lower: 0}\n"
            "      - {metric: J, unit: image_weighted, upper: 1}\n",
            "sites.A.rules[1]",
        ),
    ],
    ids=[
        "site override with no rules",
        "shares sum to 0.999",
        "a zero share",
        "baseline_periods 0",
        "rule twice",
        "rule twice in a site",
    ],
)
def test_the_protocol_refuses_each_rule_at_its_edge(text, key):
    """Kills: a site override with an empty rule list, shares summing to 0.999 or holding a zero,
    `baseline_periods: 0`, one metric and unit listed twice (at the top or in a site), accepted."""
    with pytest.raises(RecordError) as err:
        parse_protocol(text)
    assert key in str(err.value)


def test_the_protocol_accepts_what_is_at_its_edge():
    """Kills: `lower == upper` refused; shares summing to 1 within the tolerance refused; one period of baseline."""
    point = BASE.replace("lower: -0.10}", "lower: 0.25, upper: 0.25}")
    assert parse_protocol(point).rules[0].lower == parse_protocol(point).rules[0].upper == 0.25
    shares = "case_mix_reference:\n  risk_stratum: {very_low: 0.7, low: 0.1, moderate: 0.2}\n"
    assert parse_protocol(BASE + shares).case_mix_reference
    near = shares.replace("0.2}", "0.2000005}")  # off by 5e-7: within 1e-6
    assert parse_protocol(BASE + near).case_mix_reference
    assert parse_protocol(BASE + "baseline_periods: 1\n").baseline_periods == 1


# --- multiplicity's adjusted flag, and the notifier ----------------------------------------------------


def test_the_adjusted_flag_is_strict_at_alpha():
    """Kills: the adjusted flag set at p_adjusted == alpha."""
    quantiles = (0.025, 0.975)
    alpha = alpha_of(quantiles)
    for p, flagged in ((alpha, False), (math.nextafter(alpha, 0), True)):
        rows = [{"p_value": p}]
        add_adjusted_columns(rows, ["f"], quantiles)
        assert rows[0]["p_adjusted"] == p and rows[0]["excludes_zero_adjusted"] is flagged


def test_a_notifier_command_killed_by_a_signal_is_not_delivered(tmp_path):
    """Kills: a notifier command killed by a signal counted as delivered."""
    for command in (
        "sh -c 'kill -9 $$'",
        f'{sys.executable} -c "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"',
    ):
        with pytest.raises(NotifyError, match="killed by signal SIG"):
            send({"alert_id": "a1"}, command=command, timeout=10)
        result = notify_new(tmp_path, [{"alert_id": "a1"}], lambda p, c=command: send(p, command=c, timeout=10))
        assert result.sent == [] and not (tmp_path / "monitor" / "notified.json").exists()
