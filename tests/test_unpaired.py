"""Model versions compared as deployed (issue 28, section 3): `compare --unpaired [--strata]`, `evaluate --by`,
and a folder of CSV files read as one dataset."""

from __future__ import annotations

import csv
import math

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from scipy import stats

from autheval.cli.main import main

SEED = 20260711  # the reference scheme's default seed
STRIDE = 1000  # autheval.estimation.unpaired.SEED_STRIDE, restated: the documented cell seeds


def log(n: int, seed: int, shift: float = 0.0, prefix: str = "c") -> pa.Table:
    """An AuthEval log with site, model_version and risk_stratum columns; clusters of 3 cases, one site each."""
    rng = np.random.default_rng(seed)
    prop = rng.integers(0, 4, n)
    ex = np.where(rng.random(n) < 0.35, rng.integers(0, 4, n), prop)
    ue = rng.normal(size=n)
    up = np.where(prop == ex, ue, ue + shift + rng.normal(size=n))
    return pa.table(
        {
            "case_id": [f"{prefix}{i:04d}" for i in range(n)],
            "cluster_id": [f"L{i // 3:03d}" for i in range(n)],
            "proposed_action": [f"a{a}" for a in prop],
            "executed_action": [f"a{a}" for a in ex],
            "utility_executed_local": ue,
            "utility_proposed_local": up,
            "site": [("s1", "s2")[(i // 3) % 2] for i in range(n)],
            "model_version": [("v1", "v2")[(i // 6) % 2] for i in range(n)],
            "risk_stratum": [("low", "high")[(i // 3) % 2] for i in range(n)],
        }
    )


def write(table: pa.Table, path):
    pacsv.write_csv(table, path)
    return path


def rows(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def num(text: str) -> float:
    return float(text)


def run(*argv: str) -> int:
    return main(list(argv))


def one_line(capsys, code, *words):
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("autheval: error:")]
    assert code == 2 and len(errors) == 1, err
    assert all(w in errors[0] for w in words), errors[0]


def cluster_sums(table: pa.Table, keys=("cluster_id",)):
    """(gap sums, case counts) per cluster, clusters in ascending key order (the reference stream's order)."""
    gap = np.asarray(table["utility_proposed_local"]) - np.asarray(table["utility_executed_local"])
    ids = list(zip(*(table[k].to_pylist() for k in keys)))
    order = sorted(set(ids))
    at = {k: i for i, k in enumerate(order)}
    index = np.array([at[k] for k in ids])
    return np.bincount(index, gap, len(order)), np.bincount(index, None, len(order)).astype(float)


def boot(y, x, seed, reps):
    """numpy's whole-cluster bootstrap of sum y / sum x: default_rng(seed).integers(0, G, size=G) per replicate."""
    rng = np.random.default_rng(seed)
    g = len(y)
    out = np.empty(reps)
    for r in range(reps):
        counts = np.bincount(rng.integers(0, g, size=g), minlength=g)
        out[r] = counts @ y / (counts @ x)
    return out


def linear_se(y, x):
    g, r = len(y), y.sum() / x.sum()
    return math.sqrt(g / (g - 1) * ((y - r * x) ** 2).sum()) / x.sum()


def find(table, **where):
    found = [r for r in table if all(r[k] == v for k, v in where.items())]
    assert len(found) == 1, (where, len(found))
    return found[0]


@pytest.fixture
def arms(tmp_path):
    a, b = log(150, 1), log(180, 2, shift=0.4, prefix="d")
    return a, b, write(a, tmp_path / "v1.csv"), write(b, tmp_path / "v2.csv")


def test_unpaired_interval_equals_independent_bootstraps_and_the_delta_method(tmp_path, arms):
    a, b, pa_, pb_ = arms
    reps = 400
    out = tmp_path / "out"
    assert (
        run(
            "compare",
            "--unpaired",
            "--arm",
            f"v1={pa_}",
            "--arm",
            f"v2={pb_}",
            "--scheme",
            "reference",
            "--reps",
            str(reps),
            "--no-progress",
            "--output-dir",
            str(out),
        )
        == 0
    )
    table = rows(out / "unpaired_contrast.csv")
    ya, xa = cluster_sums(a)
    yb, xb = cluster_sums(b)
    point = yb.sum() / xb.sum() - ya.sum() / xa.sum()
    # independent bootstraps: arm v1 is cell 0 (seed), arm v2 cell 1 (seed + STRIDE)
    diff = boot(yb, xb, SEED + STRIDE, reps) - boot(ya, xa, SEED, reps)
    row = find(table, unit="image_weighted", metric="Delta_authority", interval_method="bootstrap_reference")
    assert row["contrast"] == "v2 minus v1" and row["strata"] == "none"
    assert (row["n_clusters_a"], row["n_clusters_b"]) == (str(len(yb)), str(len(ya)))
    assert (row["seeds_a"], row["seeds_b"]) == (str(SEED + STRIDE), str(SEED))
    assert abs(num(row["difference"]) - point) < 1e-12
    lo, hi = np.quantile(diff, [0.025, 0.975])
    assert abs(num(row["ci_lower"]) - lo) < 1e-12 and abs(num(row["ci_upper"]) - hi) < 1e-12
    tail = min((diff <= 0).sum(), (diff >= 0).sum())
    assert abs(num(row["p_value"]) - min(1.0, 2 * (1 + tail) / (reps + 1))) < 1e-12
    # the delta method: independent variances add, Welch-Satterthwaite t
    va, vb = linear_se(ya, xa) ** 2, linear_se(yb, xb) ** 2
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(ya) - 1) + vb**2 / (len(yb) - 1))
    row = find(table, unit="image_weighted", metric="Delta_authority", interval_method="delta_method")
    assert abs(num(row["difference"]) - point) < 1e-12
    assert abs(num(row["std_error"]) - se) < 1e-12
    assert abs(num(row["ci_lower"]) - (point + stats.t.ppf(0.025, df) * se)) < 1e-12
    assert abs(num(row["ci_upper"]) - (point + stats.t.ppf(0.975, df) * se)) < 1e-12
    assert abs(num(row["p_value"]) - 2 * stats.t.sf(abs(point) / se, df)) < 1e-10
    # the other metrics too; not-recoverable ones say why, with no number
    assert find(table, unit="cluster_equal", metric="J", interval_method="delta_method")["difference"]
    missing = find(table, unit="image_weighted", metric="J_std", interval_method="bootstrap_reference")
    assert missing["difference"] == "" and "utility_proposed_global" in missing["reason"]


def test_stratified_unpaired_weights_strata_as_declared(tmp_path, arms):
    a, b, pa_, pb_ = arms
    out = tmp_path / "out"
    assert (
        run(
            "compare",
            "--unpaired",
            "--strata",
            "site",
            "--arm",
            f"v1={pa_}",
            "--arm",
            f"v2={pb_}",
            "--scheme",
            "reference",
            "--reps",
            "200",
            "--no-progress",
            "--output-dir",
            str(out),
        )
        == 0
    )
    table = rows(out / "unpaired_contrast.csv")
    row = find(table, unit="image_weighted", metric="Delta_authority", interval_method="delta_method")
    assert row["strata"] == "site" and row["n_strata"] == "2" and "pooled share of images" in row["strata_weights"]
    sites = ("s1", "s2")
    part = {(arm, s): t.filter(pa.compute.equal(t["site"], s)) for arm, t in (("a", a), ("b", b)) for s in sites}
    sums = {k: cluster_sums(v) for k, v in part.items()}
    n = {s: part[("a", s)].num_rows + part[("b", s)].num_rows for s in sites}
    w = {s: n[s] / sum(n.values()) for s in sites}
    ratio = {k: y.sum() / x.sum() for k, (y, x) in sums.items()}
    point = sum(w[s] * (ratio[("b", s)] - ratio[("a", s)]) for s in sites)
    se = math.sqrt(sum(w[s] ** 2 * linear_se(*sums[(arm, s)]) ** 2 for arm in "ab" for s in sites))
    assert abs(num(row["difference"]) - point) < 1e-12 and abs(num(row["std_error"]) - se) < 1e-12
    # cells: v1's strata are cells 0 and 1, v2's 2 and 3, strata in sorted order
    boot_row = find(table, unit="image_weighted", metric="Delta_authority", interval_method="bootstrap_reference")
    assert (
        boot_row["seeds_b"] == f"{SEED} {SEED + STRIDE}"
        and boot_row["seeds_a"] == f"{SEED + 2 * STRIDE} {SEED + 3 * STRIDE}"
    )
    reps = 200
    diff = sum(
        w[s] * (boot(*sums[("b", s)], SEED + (2 + j) * STRIDE, reps) - boot(*sums[("a", s)], SEED + j * STRIDE, reps))
        for j, s in enumerate(sites)
    )
    assert abs(num(boot_row["ci_lower"]) - np.quantile(diff, 0.025)) < 1e-12
    assert abs(num(boot_row["ci_upper"]) - np.quantile(diff, 0.975)) < 1e-12


def test_unpaired_refusals_are_one_line(tmp_path, arms, capsys):
    a, b, pa_, pb_ = arms
    out = str(tmp_path / "out")
    common = ("--reps", "100", "--no-progress", "--output-dir", out)
    # paired arms of other clusters: the refusal names the way out
    code = run("compare", "--arm", f"v1={pa_}", "--arm", f"v2={pb_}", *common)
    one_line(capsys, code, "needs identical clusters", "--unpaired")
    code = run("compare", "--strata", "site", "--arm", f"v1={pa_}", "--arm", f"v2={pb_}", *common)
    one_line(capsys, code, "--strata", "--unpaired")
    code = run("compare", "--unpaired", "--arm", f"v1={pa_}", *common)
    one_line(capsys, code, "--arm", "two arms")
    code = run("compare", "--unpaired", "--strata", "region", "--arm", f"v1={pa_}", "--arm", f"v2={pb_}", *common)
    one_line(capsys, code, "--strata", "'region'", "no such column")
    code = run("compare", "--unpaired", "--strata", "site,,x", "--arm", f"v1={pa_}", "--arm", f"v2={pb_}", *common)
    one_line(capsys, code, "--strata", "none empty")
    only = write(b.filter(pa.compute.equal(b["site"], "s1")), tmp_path / "only_s1.csv")
    code = run("compare", "--unpaired", "--strata", "site", "--arm", f"v1={pa_}", "--arm", f"v2={only}", *common)
    one_line(capsys, code, "--strata", "site=s2", "'v1' only")
    # a cluster in two risk strata cannot be resampled whole within a stratum
    split = a.set_column(
        a.schema.get_field_index("risk_stratum"),
        "risk_stratum",
        pa.array([("low", "high")[i % 2] for i in range(a.num_rows)]),
    )
    code = run(
        "compare",
        "--unpaired",
        "--strata",
        "risk_stratum",
        "--arm",
        f"v1={write(split, tmp_path / 'split.csv')}",
        "--arm",
        f"v2={pb_}",
        *common,
    )
    one_line(capsys, code, "cluster_id", "two strata")
    # whitespace, empty values in a strata column
    for bad in (" s1", "", "all"):
        values = a["site"].to_pylist()
        values[4] = bad
        table = a.set_column(a.schema.get_field_index("site"), "site", pa.array(values))
        code = run(
            "compare",
            "--unpaired",
            "--strata",
            "site",
            "--arm",
            f"v1={write(table, tmp_path / 'bad.csv')}",
            "--arm",
            f"v2={pb_}",
            *common,
        )
        one_line(capsys, code, "site", "row 5")


def test_evaluate_by_equals_evaluate_of_each_subset(tmp_path, capsys):
    table = log(240, 3)
    source = write(table, tmp_path / "log.csv")
    out = tmp_path / "by"
    assert (
        run(
            "evaluate",
            "--by",
            "site,model_version",
            "--input",
            str(source),
            "--reps",
            "200",
            "--no-progress",
            "--output-dir",
            str(out),
        )
        == 0
    )
    by = rows(out / "estimates.csv")
    groups = sorted({(r["by_site"], r["by_model_version"]) for r in by})
    assert groups == [("s1", "v1"), ("s1", "v2"), ("s2", "v1"), ("s2", "v2")]
    for site, version in groups:
        mask = pa.compute.and_(pa.compute.equal(table["site"], site), pa.compute.equal(table["model_version"], version))
        subset = write(table.filter(mask), tmp_path / f"{site}_{version}.csv")
        alone = tmp_path / f"alone_{site}_{version}"
        assert (
            run("evaluate", "--input", str(subset), "--reps", "200", "--no-progress", "--output-dir", str(alone)) == 0
        )
        expected = rows(alone / "estimates.csv")
        got = [r for r in by if (r["by_site"], r["by_model_version"]) == (site, version)]
        assert len(got) == len(expected) == 16
        for g, e in zip(got, expected):
            assert g["analysis"] == f"site={site},model_version={version}"
            assert (g["unit"], g["metric"], g["available"], g["seed"]) == (
                e["unit"],
                e["metric"],
                e["available"],
                e["seed"],
            )
            for column in ("estimate", "ci_lower", "ci_upper", "p_value"):
                assert (g[column] == "") == (e[column] == "")
                if g[column]:
                    assert abs(num(g[column]) - num(e[column])) <= 1e-12 * max(1.0, abs(num(e[column])))


def test_evaluate_by_refusals_are_one_line(tmp_path, capsys):
    table = log(60, 4)
    source = write(table, tmp_path / "log.csv")
    out = str(tmp_path / "out")
    one_line(
        capsys,
        run("evaluate", "--by", "site,region", "--input", str(source), "--output-dir", out),
        "--by",
        "'region'",
        "no such column",
    )
    one_line(
        capsys, run("evaluate", "--by", "site, model_version", "--input", str(source), "--output-dir", out), "--by"
    )
    one_line(capsys, run("evaluate", "--by", "site,site", "--input", str(source), "--output-dir", out), "--by", "twice")
    for bad in (" s1", "", "All"):
        values = table["site"].to_pylist()
        values[7] = bad
        broken = write(
            table.set_column(table.schema.get_field_index("site"), "site", pa.array(values)), tmp_path / "b.csv"
        )
        one_line(
            capsys,
            run("evaluate", "--by", "site", "--input", str(broken), "--output-dir", out),
            str(broken),
            "'site'",
            "row 8",
        )
    assert not (tmp_path / "out").exists()


def test_a_folder_of_csv_files_equals_the_concatenated_file(tmp_path, capsys):
    table = log(200, 5)
    whole = write(table, tmp_path / "all.csv")
    folder = tmp_path / "monthly"
    folder.mkdir()
    for name, start, length in (("2026-01.csv", 0, 70), ("2026-02.csv", 70, 10), ("2026-03.csv", 80, 120)):
        write(table.slice(start, length), folder / name)
    (folder / ".partial.csv").write_text("garbage")  # hidden: skipped, as in a Parquet folder
    outs = {}
    for name, source in (("whole", whole), ("folder", folder)):
        outs[name] = tmp_path / name
        assert (
            run("evaluate", "--input", str(source), "--reps", "200", "--no-progress", "--output-dir", str(outs[name]))
            == 0
        )
    got, expected = rows(outs["folder"] / "estimates.csv"), rows(outs["whole"] / "estimates.csv")
    assert len(got) == len(expected) == 16
    for g, e in zip(got, expected):
        for column in ("estimate", "ci_lower", "ci_upper", "p_value", "n", "n_clusters"):
            assert (g[column] == "") == (e[column] == "")
            if g[column]:
                assert abs(num(g[column]) - num(e[column])) <= 1e-12 * max(1.0, abs(num(e[column])))
    # a bad row is named by its file and its row in that file
    lines = (folder / "2026-02.csv").read_text().splitlines()
    case_id, _, rest = lines[3].split(",", 2)
    lines[3] = f"{case_id},,{rest}"  # the third row's cluster_id empty
    (folder / "2026-02.csv").write_text("\n".join(lines) + "\n")
    code = run("evaluate", "--input", str(folder), "--no-progress", "--output-dir", str(tmp_path / "x"))
    one_line(capsys, code, "2026-02.csv", "row 3")


def test_a_csv_folder_with_another_header_or_parquet_is_refused(tmp_path, capsys):
    import pyarrow.parquet as pq

    table = log(60, 6)
    folder = tmp_path / "monthly"
    folder.mkdir()
    write(table.slice(0, 30), folder / "a.csv")
    write(table.slice(30).drop_columns(["risk_stratum"]), folder / "b.csv")
    one_line(
        capsys, run("evaluate", "--input", str(folder), "--output-dir", str(tmp_path / "o")), "b.csv", "same header"
    )
    write(table.slice(30), folder / "b.csv")
    pq.write_table(table.slice(0, 5), folder / "c.parquet")
    one_line(
        capsys, run("evaluate", "--input", str(folder), "--output-dir", str(tmp_path / "o")), "mixes Parquet and CSV"
    )
