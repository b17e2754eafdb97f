"""Issue 28, section 1 (items 1, 3, 6, 7, 8): the monitor's statistics. A declared family whose levels do not
loosen as hypotheses join; a status that agrees with the running p-value and never passes silently after an
alert; clusters keyed by site in the pooled slice; case-mix categories fixed before the data that tests them;
a numerically stable variance."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from autheval.errors import RecordError
from autheval.monitoring.landing import read_landed
from autheval.monitoring.monitor import adjusted_levels, monitor_table
from autheval.monitoring.protocol import parse_protocol
from warehouse.sql import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROTOCOL = """\
version: stats
alpha: 0.05
horizon_clusters: 300
min_clusters: 30
baseline_periods: 2
rules:
  - {metric: Delta_authority, unit: cluster_equal, lower: -0.10}
"""


def log(site, month, clusters, rng, gap=0.05, prefix=None, utility=0.0, sd=1.0, actions=4):
    rows: dict[str, list] = {
        k: []
        for k in "case_id cluster_id proposed_action executed_action utility_executed_local utility_proposed_local "
        "timestamp site model_version".split()
    }
    for c in range(clusters):
        for i in range(2):
            a = int(rng.integers(0, actions))
            changed = i == 0 or rng.random() < 0.3
            executed = utility + rng.normal(0.0, sd)
            rows["case_id"].append(f"{site}-{month}-{c}-{i}")
            rows["cluster_id"].append(f"{prefix or site + '-' + str(month)}-{c:05d}")
            rows["proposed_action"].append(f"a{a}")
            rows["executed_action"].append(f"a{(a + 1) % 4 if changed else a}")
            rows["utility_executed_local"].append(executed)
            rows["utility_proposed_local"].append(executed + (gap + rng.normal(0, 0.3 * sd) if changed else 0.0))
            rows["timestamp"].append(f"2026-{month:02d}-15")
            rows["site"].append(site)
            rows["model_version"].append("v1")
    return pa.table(rows)


def _dir(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def land(tables, tmp_path) -> pa.Table:
    out = []
    for i, table in enumerate(tables):
        path = tmp_path / f"log{i}.csv"
        pacsv.write_csv(table, path)
        out.append(read_landed(path)[1])
    return pa.concat_tables(out)


# --- 1.1 the family is declared, not discovered --------------------------------------------------------------


def _looks(entries: dict[int, list[tuple[str, float]]]) -> pa.Table:
    rows = [
        {"hypothesis": h, "look": k + 1, "period": period, "p_value": p, "alpha": 0.05, "tested": True}
        for h, looks in entries.items()
        for k, (period, p) in enumerate(looks)
    ]
    return pa.Table.from_pylist(rows)


def test_a_hypothesis_that_enters_early_is_not_tested_at_a_looser_level():
    # hypothesis 0 alone at the first period; 1 and 2 join later: the family is 3 (or the declared 10) at every
    # period, so 0's first look is decided at 0.05 / 3 (0.005), never at 0.05 as a family of one
    looks = _looks({0: [("01", 0.02), ("02", 0.02), ("03", 0.02)], 1: [("02", 0.5), ("03", 0.5)], 2: [("03", 0.9)]})
    con = connect(threads=1)
    found = {(r["hypothesis"], r["period"]): r for r in adjusted_levels(con, looks, "holm").to_pylist()}
    assert found[(0, "01")]["family_size"] == 3 and found[(0, "01")]["alpha_adjusted"] == pytest.approx(0.05 / 3)
    assert {r["family_size"] for r in found.values()} == {3}
    declared = adjusted_levels(con, looks, "holm", 10).to_pylist()
    assert {r["family_size"] for r in declared} == {10}
    first = next(r for r in declared if (r["hypothesis"], r["period"]) == (0, "01"))
    assert first["alpha_adjusted"] == pytest.approx(0.005)  # the hypotheses without data count with p = 1
    assert next(r for r in adjusted_levels(con, looks, "bonferroni", 10).to_pylist())["alpha_adjusted"] == 0.005


def test_the_family_size_is_declared_in_the_protocol_and_checked():
    assert parse_protocol(PROTOCOL + "family_size: 12\n").family_size == 12
    assert parse_protocol(PROTOCOL).family_size is None
    for bad in ("0", "'12'", "1.5"):
        with pytest.raises(RecordError, match="family_size"):
            parse_protocol(PROTOCOL + f"family_size: {bad}\n")


# the simulated family-wise error and power (benchmarks/monitoring_family.py): tests/test_monitoring_family.py


# --- 1.3 status and p-value agree; a pass never follows an alert silently ---------------------------------


def test_an_alert_is_not_followed_by_a_silent_pass(tmp_path):
    rng = np.random.default_rng(7)
    early = [log("A", m, 40, rng, gap=-1.0) for m in (1, 2)]  # far below the bound
    late = [log("A", m, 40, rng, gap=0.6) for m in range(3, 13)]  # then far above it: the estimate recovers
    rows = monitor_table(land(early + late, tmp_path), parse_protocol(PROTOCOL), reps=0).table.to_pylist()
    series = [r for r in rows if r["site"] == "A" and r["model_version"] == "v1"]
    assert series[1]["status"] == "alert"
    assert series[-1]["estimate"] > -0.10  # the look's own sequence alone would pass
    statuses = [r["status"] for r in series]
    assert "pass" not in statuses[statuses.index("alert") :]
    for r in series:  # per look and running p-values, named apart; the running one decides
        if r["p_running"] is not None and r["p_value"] is not None:
            assert r["p_running"] <= r["p_value"]
            assert (r["status"] == "alert") == (r["p_running"] <= r["alpha_adjusted"] or "disjoint" in r["reason"])
    last = series[-1]
    assert last["cs_lower"] > last["cs_upper"] or last["cs_upper"] < -0.10
    widths = [r["cs_upper"] - r["cs_lower"] for r in series if r["n_clusters"] >= 30]
    assert all(b <= a + 1e-12 for a, b in zip(widths, widths[1:]))  # the running intersection only shrinks


# --- 1.6 clusters are keyed by site ------------------------------------------------------------------------


def test_two_sites_that_reuse_cluster_ids_hold_twice_the_clusters_pooled(tmp_path):
    rng = np.random.default_rng(11)
    tables = [log(site, 1, 40, rng, prefix="L") for site in ("A", "B")]  # both L00000..L00039
    monitoring = monitor_table(land(tables, tmp_path), parse_protocol(PROTOCOL), reps=20)
    rows = monitoring.table.to_pylist()
    pooled = next(r for r in rows if (r["site"], r["model_version"]) == ("all", "all"))
    assert pooled["n_clusters"] == 80
    assert pooled["ci_lower"] is not None  # the bootstrap of the pooled slice resamples 80 clusters too
    counted = sum(r["count"] for r in monitoring.case_mix.to_pylist() if r["dimension"] == "proposed_action")
    assert counted == pooled["n_clusters"]


# --- 1.7 case-mix categories from the baseline or the protocol ----------------------------------------------


def test_a_category_landed_later_does_not_change_earlier_e_values(tmp_path):
    rng = np.random.default_rng(13)
    tables = [log("A", m, 40, rng) for m in range(1, 5)]
    protocol = parse_protocol(PROTOCOL)
    before = monitor_table(land(tables, _dir(tmp_path, "a")), protocol, reps=0).case_mix.to_pylist()
    later = log("A", 5, 40, rng)  # a later file that starts carrying a risk stratum, one the baseline never saw
    later = later.append_column("risk_stratum", pa.array(["high"] * later.num_rows))
    after = monitor_table(land([*tables, later], _dir(tmp_path, "b")), protocol, reps=0).case_mix.to_pylist()
    key = ("site", "period", "dimension", "category")
    was = {tuple(r[k] for k in key): (r["bayes_factor"], r["p_value"], r["alpha"]) for r in before}
    now = {tuple(r[k] for k in key): (r["bayes_factor"], r["p_value"], r["alpha"]) for r in after}
    assert was and {k: v for k, v in now.items() if k[1] <= "2026-04"} == was


def test_a_reference_category_that_is_not_an_action_level_is_refused(tmp_path):
    text = PROTOCOL + "case_mix_reference:\n  proposed_action: {a0: 0.5, a9: 0.5}\n"
    with pytest.raises(RecordError, match=r"case_mix_reference.proposed_action.a9: 'a9' is not a proposed_action"):
        parse_protocol(text)
    with pytest.raises(RecordError, match="workflow_profile"):
        parse_protocol(PROTOCOL + "case_mix_reference:\n  workflow_profile: {changed: 0.5, maybe: 0.5}\n")
    assert parse_protocol(PROTOCOL + "case_mix_reference:\n  proposed_action: {a0: 0.5, a3: 0.5}\n")


# --- 1.8 a numerically stable variance ----------------------------------------------------------------------


def test_utilities_near_a_million_keep_the_width_of_their_sequence(tmp_path):
    rng = np.random.default_rng(17)
    tables = [log("A", m, 40, rng, utility=1e6, sd=0.01, gap=0.0) for m in (1, 2, 3)]
    shifted = [t.set_column(4, "utility_executed_local", pa.compute.subtract(t.column(4), 1e6)) for t in tables]
    shifted = [t.set_column(5, "utility_proposed_local", pa.compute.subtract(t.column(5), 1e6)) for t in shifted]
    rules = "".join(
        f"  - {{metric: {m}, unit: {u}, lower: -1.0e+12}}\n"
        for m, u in (("J", "image_weighted"), ("J_auth", "cluster_equal"))
    )
    protocol = parse_protocol(PROTOCOL.split("rules:")[0] + "rules:\n" + rules)
    big = monitor_table(land(tables, _dir(tmp_path, "big")), protocol, reps=0).table.to_pylist()
    small = monitor_table(land(shifted, _dir(tmp_path, "small")), protocol, reps=0).table.to_pylist()
    assert len(big) == len(small) == 18
    for b, s in zip(big, small):
        width = s["cs_upper"] - s["cs_lower"]
        assert width > 0 and math.isfinite(width)
        assert b["cs_upper"] - b["cs_lower"] == pytest.approx(width, rel=1e-3)
