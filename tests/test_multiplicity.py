"""Many comparisons: bootstrap p-values, Holm-adjusted p-values and Benjamini-Hochberg q-values over a
declared family named in every contrast and subgroup row; the report's flag is the adjusted one.

Pinned by plain loops (Holm), scipy (BH), the reference stream drawn by hand (the p-value), and a null
cohort of many exchangeable arms, where flags on their own find differences that are not there.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from autheval.estimation.estimators import estimate
from autheval.estimation.multiplicity import (
    ADJUSTED_COLUMNS,
    TESTED_METRICS,
    adjust,
    adjust_subgroups,
    alpha_of,
    contrast_family,
    flagged,
)
from autheval.records.read import read_records, records_from_table
from tests.conftest import read_csv_rows, reference_file, run_cli


def holm_loop(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, the textbook way: sorted, (m - j) p, running max, capped."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p[i]))
        out[i] = running
    return out


def test_holm_and_bh_by_hand():
    rows = adjust(["f"] * 4, [0.01, 0.04, 0.03, 0.005])
    assert [r["p_adjusted"] for r in rows] == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert [r["q_value"] for r in rows] == pytest.approx([0.02, 0.04, 0.04, 0.02], abs=1e-15)
    assert {r["family_size"] for r in rows} == {4}


def test_adjustments_equal_a_loop_and_scipy_over_several_families():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    families, p = [], []
    for name, m in (("a", 1), ("b", 7), ("c", 40)):
        values = np.round(rng.beta(0.4, 1.0, m), 3)  # rounded: ties
        families += [name] * m
        p += values.tolist()
    families += [None, "b"]  # an untested row (no family), and one with no p-value
    p += [0.001, None]
    rows = adjust(families, p)
    assert rows[-1] == rows[-2] == {"family_size": None, "p_adjusted": None, "q_value": None}
    for name in ("a", "b", "c"):
        idx = [i for i, f in enumerate(families) if f == name and p[i] is not None]
        ps = [p[i] for i in idx]
        holm, bh = holm_loop(ps), stats.false_discovery_control(ps, method="bh")
        for k, i in enumerate(idx):
            assert rows[i]["family_size"] == len(idx)
            assert rows[i]["p_adjusted"] == pytest.approx(holm[k], rel=1e-14, abs=1e-15)
            assert rows[i]["q_value"] == pytest.approx(bh[k], rel=1e-14, abs=1e-15)
            assert p[i] <= rows[i]["q_value"] <= rows[i]["p_adjusted"] + 1e-15  # BH never above Holm


def test_alpha_is_the_intervals_level():
    assert alpha_of((0.025, 0.975)) == 0.05 and alpha_of((0.05, 0.95)) == 0.1


# --- the bootstrap p-value of a contrast --------------------------------------------------------------


@pytest.fixture(scope="module")
def three_arms():
    names = ["trace_llava_med_head", "trace_medgemma_readout", "trace_clip_probe"]
    records = [read_records(reference_file(n), analysis=n) for n in names]
    pairs = [(b, a) for j, b in enumerate(names) for a in names[:j]]
    return names, records, estimate(records, reps=600, contrasts=pairs, family="proposal dependence")


def test_the_contrast_p_value_is_the_tail_share_of_the_reference_stream(three_arms):
    """Twice the smaller share of replicate differences at or below and at or above 0, with the +1,
    from the reference stream drawn by hand (default_rng(20260711), clusters in id order)."""
    names, records, result = three_arms
    sums = {}
    for r in records:
        t = r.table
        k = np.asarray(t.column("cluster_id").to_pylist(), dtype=object).astype(str)
        gap = np.asarray(t.column("utility_proposed_local")) - np.asarray(t.column("utility_executed_local"))
        _, rank = np.unique(k, return_inverse=True)
        sums[r.analysis] = (np.bincount(rank, weights=gap), np.bincount(rank).astype(float))
    rng = np.random.default_rng(20260711)
    g = len(sums[names[0]][1])
    idx = [rng.integers(0, g, size=g) for _ in range(600)]
    for row in [c for c in result.contrasts if c["unit"] == "image_weighted"]:
        (sa, n), (sb, _) = sums[row["contrast"].split(" minus ")[0]], sums[row["contrast"].split(" minus ")[1]]
        d = np.array([sa[i].sum() / n[i].sum() - sb[i].sum() / n[i].sum() for i in idx])
        expected = min(1.0, 2 * (1 + min((d <= 0).sum(), (d >= 0).sum())) / (len(d) + 1))
        assert row["p_value"] == pytest.approx(expected, rel=1e-12)
    assert any(0.05 < c["p_value"] < 1 for c in result.contrasts)  # a p-value away from the floor


def test_every_contrast_row_names_its_family_and_adjustment(three_arms):
    _, _, result = three_arms
    alpha = alpha_of(result.quantiles)
    for unit in ("image_weighted", "cluster_equal"):
        rows = [c for c in result.contrasts if c["unit"] == unit]
        assert len(rows) == 3
        p = [r["p_value"] for r in rows]
        for row, holm in zip(rows, holm_loop(p)):
            assert row["family"] == contrast_family("proposal dependence", unit) == f"proposal dependence / {unit}"
            assert row["family_size"] == 3 and row["adjustment"] == "holm"
            assert row["p_adjusted"] == pytest.approx(holm, rel=1e-14)
            assert row["excludes_zero_adjusted"] == (row["p_adjusted"] < alpha)
            assert row["p_value"] <= row["q_value"] <= row["p_adjusted"]
            if row["excludes_zero_adjusted"]:
                assert row["excludes_zero"]  # the adjusted flag implies the raw one


def test_estimates_carry_p_values_for_the_gaps_only(three_arms):
    _, _, result = three_arms
    for row in result.estimates:
        if row["metric"] in TESTED_METRICS and row["available"]:
            assert 0 < row["p_value"] <= 1, row
        else:
            assert row["p_value"] is None, row


# --- many arms, no differences: the flags on their own find some, the adjusted ones do not ---------------


def null_cohort(n_arms: int = 9, n_clusters: int = 60, seed: int = 12):
    """Arms that differ only by noise (the same selections, independent proposal scores of one
    distribution on identical clusters), and one arm with a real gap."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, n_clusters)
    arms = []
    for a in range(n_arms + 1):
        rows = []
        for c, size in enumerate(sizes):
            for i in range(size):
                u_exec = -float(rng.integers(0, 4))
                shift = 1.5 if a == n_arms else 0.0
                rows.append(
                    {
                        "case_id": f"k{c:03d}-{i}",
                        "cluster_id": f"k{c:03d}",
                        "proposed_action": "a1",
                        "executed_action": "a2",
                        "utility_executed_local": u_exec,
                        "utility_proposed_local": u_exec + shift + float(rng.normal(0, 2)),
                    }
                )
        arms.append(records_from_table(pa.Table.from_pylist(rows), f"arm{a}", f"arm{a}", "0" * 64))
    return arms


@pytest.fixture(scope="module")
def many_contrasts():
    arms = null_cohort()
    names = [a.analysis for a in arms]
    pairs = [(b, a) for j, b in enumerate(names) for a in names[:j]]
    result = estimate(arms, reps=4000, contrasts=pairs, family="null cohort")  # 2 m / (B + 1) < 0.05
    return names, result


def test_raw_flags_find_null_differences_the_adjusted_flags_do_not(many_contrasts):
    names, result = many_contrasts
    real = names[-1]
    null = [c for c in result.contrasts if real not in c["contrast"]]
    shifted = [c for c in result.contrasts if real in c["contrast"]]
    assert len(result.contrasts) == 2 * len(names) * (len(names) - 1) // 2
    assert {c["family_size"] for c in result.contrasts} == {len(names) * (len(names) - 1) // 2}
    assert sum(c["excludes_zero"] for c in null) >= 3  # chance findings, each flagged on its own
    assert sum(c["excludes_zero_adjusted"] for c in null) == 0
    assert sum(c["excludes_zero_adjusted"] for c in shifted) >= len(shifted) // 2  # the real gap survives
    assert sum(c["q_value"] < 0.05 for c in null) == 0


def test_too_few_replicates_for_the_family_is_a_warning():
    """45 contrasts per unit need 2 m / alpha = 1800 replicates before any can pass Holm's adjustment."""
    arms = null_cohort(n_clusters=20)
    names = [a.analysis for a in arms]
    pairs = [(b, a) for j, b in enumerate(names) for a in names[:j]]
    with pytest.warns(
        UserWarning, match="45 contrasts per unit: with 1000 replicates no Holm-adjusted .* 1800 or more"
    ):
        result = estimate(arms, reps=1000, contrasts=pairs)
    assert not any(c["excludes_zero_adjusted"] for c in result.contrasts)
    assert not any("Holm" in w for w in estimate(arms, reps=1800, contrasts=pairs).warnings)


def test_the_lake_table_counts_both_flags(many_contrasts):
    from autheval.estimation.study import contrasts_table

    _, result = many_contrasts
    table = contrasts_table(result)
    assert set(ADJUSTED_COLUMNS) <= set(table.column_names)
    assert table.schema.field("excludes_zero_adjusted").type == pa.bool_()
    assert flagged(table) < flagged(table, adjusted=False)


# --- files and the report -------------------------------------------------------------------------------


def test_paired_contrast_csv_keeps_the_published_columns_first(tmp_path):
    arms = {"LLaVA-Med head": "trace_llava_med_head", "CLIP probe": "trace_clip_probe"}
    args = ["compare", "--reps", "300", "--output-dir", str(tmp_path)]
    for name, trace in arms.items():
        args += ["--arm", f"{name}={reference_file(trace)}"]
    assert run_cli(*args).returncode == 0
    header = (tmp_path / "paired_contrast.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["contrast", "unit", "difference", "ci_lower", "ci_upper", "excludes_zero"]
    assert header[6:] == list(ADJUSTED_COLUMNS)
    rows = read_csv_rows(tmp_path / "paired_contrast.csv")
    assert {r["family"] for r in rows} == {"contrasts / image_weighted", "contrasts / cluster_equal"}
    assert {r["family_size"] for r in rows} == {"1"} and {r["adjustment"] for r in rows} == {"holm"}


def test_the_report_flags_with_the_adjusted_column(many_contrasts):
    from autheval.estimation.study import contrasts_table
    from autheval.reporting.report import markdown_report
    from autheval.reporting.report.sections_study import CONTRAST_FLAG

    _, result = many_contrasts
    summary = pa.table(
        {
            "study": ["s"],
            "analysis": ["a"],
            "n_images": [1],
            "n_clusters": [1],
            "intervention_rate": [0.5],
            "delta": [0.1],
            **{
                f"Delta_authority_{k}{part}": [0.1]
                for k in ("image", "cluster")
                for part in ("", "_ci_lower", "_ci_upper")
            },
        }
    )
    text = markdown_report(summary, contrasts_table(result), "provenance")
    section = text.split("## Paired contrasts")[1]
    header = next(line for line in section.splitlines() if line.startswith("| contrast"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells.index(CONTRAST_FLAG) < cells.index("excludes zero (unadjusted)")
    assert "Holm" in section.split("| contrast")[0]  # the note says which flag it is
    flags = [
        line.split("|")[1 + cells.index(CONTRAST_FLAG)].strip()
        for line in section.splitlines()
        if line.startswith("| arm")
    ]
    assert flags.count("yes") == sum(c["excludes_zero_adjusted"] for c in result.contrasts)


# --- subgroups --------------------------------------------------------------------------------------------


def test_subgroup_estimates_carry_adjusted_columns_over_their_family():
    from autheval.estimation.subgroups import subgroup_tables
    from tests.test_subgroups import _study

    records, images, contexts = _study()
    out = subgroup_tables(records, images, contexts, groupings=("sex", "profile"), reps=300)
    table = adjust_subgroups(out.subgroups)
    assert table.column_names[: out.subgroups.num_columns] == out.subgroups.column_names  # p_value in place
    rows = table.to_pylist()
    estimable = {(r["grouping"], r["group_value"]) for r in rows if r["estimable"]}
    for row in rows:
        if row["metric"] in TESTED_METRICS and row["p_value"] is not None:
            assert row["family"] == f"subgroups of m x capacity / {row['unit']} / {row['metric']}"
            assert row["family_size"] == len(estimable) and row["adjustment"] == "holm"
            assert row["excludes_zero"] == (row["ci_lower"] > 0 or row["ci_upper"] < 0)
            assert row["p_adjusted"] >= row["p_value"]
        else:
            assert all(row[c] is None for c in ("family", "p_adjusted", "q_value", "excludes_zero_adjusted"))
    family = [r for r in rows if r["metric"] == "Delta_authority" and r["unit"] == "image_weighted" and r["p_value"]]
    for r, holm in zip(family, holm_loop([r["p_value"] for r in family])):
        assert r["p_adjusted"] == pytest.approx(holm, rel=1e-14)
