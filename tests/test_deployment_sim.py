"""The deployment simulator (issue 18 item 7): `autheval synth deployment` writes one landable log per
site and month from the declared model; the same seed gives the same bytes; the simulated data agree
with the model's truth (null and planted drift); a bad --drift is one line, exit 2, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autheval.cli import main as cli
from autheval.monitoring.deployment_sim import DeploymentModel, parse_drift, simulate, site_name, truth


def synth(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["synth", "deployment", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_one_landable_log_per_site_and_month_with_the_deployment_columns(tmp_path, capsys):
    from autheval.monitoring.landing import read_landed

    out = tmp_path / "deployment"
    code, text, err = synth(
        capsys,
        "--sites",
        "2",
        "--months",
        "3",
        "--out",
        str(out),
        "--clusters-per-month",
        "30",
        "--drift",
        "site-2:proposer_quality:-0.5:from=2:version=model-2",
    )
    assert code == 0, err
    assert "wrote 6 monthly logs (2 sites x 3 months)" in text and "planted: site-2:proposer_quality" in text
    logs = sorted(p.name for p in out.glob("*.csv"))
    assert logs == [f"site-{s}_2026-0{m}.csv" for s in (1, 2) for m in (1, 2, 3)]
    seen: dict[str, set[str]] = {}
    for name in logs:
        records, table = read_landed(out / name)
        assert records.level == "full_counterfactual"
        site, period = name[:-4].split("_")
        assert set(table.column("period").to_pylist()) == {period}
        raw = records.table  # the landed canonical table keeps the log's rows in order
        assert records.n_cases > records.n_clusters >= 30  # lesion clusters of several images
        clusters = set(table.column("cluster_id").to_pylist())
        seen.setdefault(site, set())
        if period != "2026-01":
            assert clusters & seen[site], name  # some lesions recur in a later month
        seen[site] |= clusters
        assert raw.num_rows == records.n_cases
    from pyarrow import csv

    later = csv.read_csv(out / "site-2_2026-02.csv")
    assert set(later.column("model_version").to_pylist()) == {"model-2"}
    assert set(csv.read_csv(out / "site-1_2026-03.csv").column("model_version").to_pylist()) == {"model-1"}
    assert set(later.column("site").to_pylist()) == {"site-2"}
    assert seen["site-1"].isdisjoint(seen["site-2"])  # a lesion belongs to one site
    model = json.loads((out / "deployment.json").read_text())
    gaps = {(r["site"], r["month"]): r["Delta_authority"] for r in model["truth"]}
    assert gaps[("site-2", 1)] == pytest.approx(-0.10) and gaps[("site-2", 2)] == pytest.approx(-0.60)
    assert gaps[("site-1", 3)] == pytest.approx(-0.10)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_bytes(tmp_path, capsys):
    def write(folder: str, seed: str, fmt: str = "csv") -> dict[str, bytes]:
        out = tmp_path / folder
        code, _, err = synth(
            capsys,
            "--sites",
            "2",
            "--months",
            "2",
            "--out",
            str(out),
            "--seed",
            seed,
            "--format",
            fmt,
            "--drift",
            "all:case_mix:0.3:from=2",
        )
        assert code == 0, err
        return {p.name: p.read_bytes() for p in sorted(out.iterdir())}

    first = write("a", "5")
    assert first == write("b", "5")
    other = write("c", "6")
    assert other.keys() == first.keys() and other["site-1_2026-01.csv"] != first["site-1_2026-01.csv"]
    parquet = write("d", "5", "parquet")
    assert parquet == write("e", "5", "parquet") and "site-2_2026-02.parquet" in parquet


def test_the_simulated_data_agree_with_the_declared_truth():
    """Each site-month's intervention rate and gap are the model's (with a planted proposer drop, a
    review change and a case-mix shift): every standardised difference below 4.5 and their mean
    within 4 standard errors of zero (a gap 10% off fails)."""
    drifts = tuple(
        parse_drift(spec, 3, 6)
        for spec in (
            "site-2:proposer_quality:-0.5:from=4",
            "site-1:review_capacity:-0.15:from=3",
            "site-3:case_mix:0.6:from=2",
        )
    )
    model = DeploymentModel(sites=3, months=6, clusters_per_month=4000, drifts=drifts)
    cases = simulate(model, seed=11)
    expected = {(r["site"], r["month"]): r for r in truth(model)}
    true_gap = {key: row["Delta_authority"] for key, row in expected.items()}
    assert true_gap[("site-2", 4)] - true_gap[("site-2", 3)] == pytest.approx(-0.5)
    assert expected[("site-1", 3)]["intervention_rate"] == pytest.approx(0.15)
    assert expected[("site-3", 2)]["Delta_authority"] < -0.15  # more high-risk lesions: a larger gap
    gap = cases.u_proposed - cases.u_executed
    assert np.all(gap[~cases.intervened] == 0)  # same action, same score
    z_gap, z_rate = [], []
    for s in range(3):
        for m in range(6):
            rows = (cases.site == s) & (cases.month == m)
            sizes = np.bincount(cases.cluster[rows])
            used = sizes > 0
            truth_row = expected[(site_name(s + 1), m + 1)]
            for values, target, out in (
                (gap, truth_row["Delta_authority"], z_gap),
                (cases.intervened.astype(float), truth_row["intervention_rate"], z_rate),
            ):
                sums = np.bincount(cases.cluster[rows], weights=values[rows])[used]
                estimate = sums.sum() / sizes[used].sum()  # a ratio over clusters, its delta-method error
                se = np.sqrt(np.sum((sums - estimate * sizes[used]) ** 2)) / sizes[used].sum()
                out.append((estimate - target) / se)
    for z in (np.array(z_gap), np.array(z_rate)):
        assert np.max(np.abs(z)) < 4.5 and abs(z.mean()) < 4 / np.sqrt(len(z)), z.round(2)


def test_deployments_drawn_together_are_independent_and_of_one_model():
    model = DeploymentModel(sites=2, months=3, clusters_per_month=20)
    cases = simulate(model, seed=3, deployments=4)
    assert sorted(set(cases.deployment.tolist())) == [0, 1, 2, 3]
    per = [np.sum(cases.deployment == d) for d in range(4)]
    assert len(set(per)) > 1  # each deployment draws its own clusters and images
    lesions = [set(cases.cluster[cases.deployment == d].tolist()) for d in range(4)]
    assert all(a.isdisjoint(b) for i, a in enumerate(lesions) for b in lesions[i + 1 :])


@pytest.mark.parametrize(
    "spec,words",
    [
        ("site-2:proposer_quality:-0.5", "at least four"),
        ("site-9:proposer_quality:-0.5:from=7", "site-9 is not one of the 3 sites"),
        ("hospital:proposer_quality:-0.5:from=7", "site-1 ... site-N"),
        ("site-2:quality:-0.5:from=7", "proposer_quality, review_capacity, case_mix"),
        ("site-2:proposer_quality:lots:from=7", "'lots' is not a number"),
        ("site-2:proposer_quality:nan:from=7", "finite"),
        ("site-2:proposer_quality:-0.5:from=13", "from= must be a month from 1 to 12"),
        ("site-2:proposer_quality:-0.5:from=0", "from= must be a month from 1 to 12"),
        ("site-2:proposer_quality:-0.5:since=7", "'since=7' is not one of"),
        ("site-2:proposer_quality:-0.5:to=high", "from=MONTH is required"),
        ("site-2:proposer_quality:-0.5:from=3:from=4", "from= is given twice"),
        ("site-2:case_mix:1.5:from=3", "share of the mix moved, from 0 to 1"),
        ("site-2:case_mix:0.5:from=3:to=extreme", "to= must be a risk stratum"),
        ("site-2:review_capacity:0.1:from=3:to=high", "to= is for case_mix drifts only"),
        ("site-2:review_capacity:-0.5:from=3", "intervention rate of site-2 in month 3 would be -0.200"),
        ("site-2:review_capacity:0.1:from=3:version=v2", "version=NAME is for proposer_quality"),
        ("site-2:proposer_quality:-0.5:from=3:version=a b", "letters, digits"),
    ],
    ids=lambda v: v if ":" in v else "",
)
def test_a_bad_drift_is_one_line_and_nothing_is_written(tmp_path, capsys, spec, words):
    out = tmp_path / "deployment"
    code, text, err = synth(capsys, "--sites", "3", "--months", "12", "--out", str(out), "--drift", spec)
    assert code == 2 and text == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autheval: error: --drift: "), err
    assert words in lines[0] and repr(spec) in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "args,words",
    [
        (("--sites", "0", "--months", "3"), "--sites: must be from 1 to 1000"),
        (("--sites", "2", "--months", "0"), "--months: must be from 1 to 600"),
        (("--sites", "2", "--months", "3", "--clusters-per-month", "0"), "--clusters-per-month: must be at least 1"),
        (("--sites", "2", "--months", "3", "--start", "2026-13"), "--start: must be a month YYYY-MM"),
        (("--sites", "2", "--months", "3", "--seed", "-4"), "--seed: must be an integer"),
    ],
)
def test_a_bad_size_is_one_line_and_nothing_is_written(tmp_path, capsys, args, words):
    out = tmp_path / "deployment"
    code, _, err = synth(capsys, *args, "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert not out.exists()


def test_logs_already_there_are_kept_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "deployment"
    args = ("--sites", "1", "--months", "1", "--out", str(out))
    assert synth(capsys, *args)[0] == 0
    before = (out / "site-1_2026-01.csv").read_bytes()
    code, _, err = synth(capsys, *args, "--seed", "9")
    assert code == 2 and "add --overwrite" in err and (out / "site-1_2026-01.csv").read_bytes() == before
    assert synth(capsys, *args, "--seed", "9", "--overwrite")[0] == 0
    assert (out / "site-1_2026-01.csv").read_bytes() != before


def test_synth_of_a_cohort_still_needs_n_and_out(capsys):
    for args, missing in ((["synth", "--out", "somewhere"], "--n"), (["synth"], "--n, --out")):
        with pytest.raises(SystemExit) as stop:
            cli.main(args)
        assert stop.value.code == 2
        assert capsys.readouterr().err == (
            f"autheval: error: the following arguments are required: {missing}; see `autheval synth --help`\n"
        )


# --- the benchmark's false-alert logic, on a small case (benchmarks/monitoring.py runs 500) --------------


@pytest.fixture(scope="module")
def protocol():
    from autheval.monitoring.protocol import load_protocol

    return load_protocol(None)


def test_few_null_deployments_alert_falsely_only_without_the_anytime_interval(protocol):
    """20 null deployments (3 sites, 24 looks, the gap on the bound) decided by the monitor's own SQL:
    the confidence sequence alerts only where the naive interval does, the corrected one only where
    the confidence sequence does, and the corrected one (almost) never; the naive one peeks into
    false alerts."""
    from benchmarks.monitoring import decide, null_hypotheses, null_model

    model = null_model(protocol, clusters=20)
    decisions = decide(model, protocol, deployments=20, seed=4)
    mask = null_hypotheses(model, protocol)
    assert mask.all() and decisions.n_clusters.shape == (20, 4, len(protocol.rules), 24)
    pooled_to_date, one_site_first = decisions.n_clusters[:, 3, 0, -1], decisions.n_clusters[:, 0, 0, 0]
    assert np.nanmin(pooled_to_date) > 3 * np.nanmax(one_site_first)  # the pool of every site, to date
    assert not np.any(decisions.cs & ~decisions.naive)  # the CS is wider than the 95% interval at every look
    assert not np.any(decisions.corrected & ~decisions.cs)  # the corrected level is at most alpha
    naive, corrected = decisions.any_alert("naive", mask), decisions.any_alert("corrected", mask)
    assert corrected.sum() <= 2  # alpha 0.05 of 20 deployments, with room for chance
    assert naive.sum() > corrected.sum()  # peeking at a 95% interval every month alerts falsely
    # where nothing is rejected, Holm decides each of the 8 hypotheses (4 slices x 2 rules) at alpha / 8
    quiet = ~corrected
    assert np.allclose(decisions.level[quiet], protocol.alpha / (4 * len(protocol.rules)))


def test_a_planted_drift_is_detected_at_its_site_and_nowhere_else(protocol):
    from benchmarks.monitoring import DRIFT, decide, delays, null_hypotheses, null_model

    model = null_model(protocol, clusters=20, drifts=(DRIFT,))
    decisions = decide(model, protocol, deployments=20, seed=5)
    mask = null_hypotheses(model, protocol)
    assert not mask[1, 0] and not mask[3, 0] and mask[0].all() and mask[2].all()  # site-2 and the pool drift
    delay = delays(decisions, site=1, rule=0, start=7)
    assert np.mean(~np.isnan(delay)) >= 0.9 and np.nanmedian(delay) <= 12
    assert decisions.any_alert("corrected", mask).sum() <= 2  # sites 1 and 3 stay quiet
    assert not decisions.corrected[:, 1, 0, :6].any()  # nothing before the drift
