"""Monitoring end to end, as a clinical evaluation group runs it (issue 28): three sites, site-3 switching
to a worse model version at month 7, a corrected re-export of site-2's January landing in month 4, and
`monitor run` once a month from cron (each month's logs dropped into the landing folder first). The
decision record keeps each look's first decision through every later run; the report and its PDF name the
alert with its site and version; each run's receipt verifies; the Dagster instance the UI reads holds
every run."""

from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from autheval.monitoring.deployment_sim import DeploymentModel, parse_drift, write_deployment
from autheval.monitoring.monitor import alerts
from tests.conftest import run_cli
from warehouse.lake import Lake

SITES, MONTHS, SWITCH = 3, 12, 7
DRIFT = f"site-3:proposer_quality:-0.6:from={SWITCH}:version=v2"
PROTOCOL = """version: e2e-protocol-1
alpha: 0.05
horizon_clusters: 400
min_clusters: 30
baseline_periods: 3
multiplicity: holm
family_size: 24
sites: {}
rules:
  - {metric: Delta_authority, unit: cluster_equal, lower: -0.10}
"""
ACK = ("monitor", "ack", "--by", "Dr A. Ngata", "--action", "acknowledged", "--note", "site-3 v2 under review")
DECISION_KEY = ("site", "model_version", "mechanism", "metric", "unit", "look")


def monthly_logs(where: Path) -> dict[str, list[Path]]:
    """The deployment's logs by month label (YYYY-MM), every site's."""
    model = DeploymentModel(sites=SITES, months=MONTHS, clusters_per_month=20, model_version="v1")
    model = replace(model, drifts=(parse_drift(DRIFT, SITES, MONTHS),))
    by_month: dict[str, list[Path]] = {}
    for path in write_deployment(model, where):
        by_month.setdefault(path.stem.split("_")[-1], []).append(path)
    return dict(sorted(by_month.items()))


def decisions(store: Lake) -> dict[tuple, dict]:
    return {tuple(r[k] for k in DECISION_KEY): r for r in store.read("monitor_decisions").to_pylist()}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The lake after twelve monthly runs, with what each run left: (root, [(exit code, lines, decision
    record, receipt copy)] by month)."""
    from dagster_project.monitor_run import monitor_run

    base = tmp_path_factory.mktemp("e2e")
    root, protocol = base / "lake", base / "protocol.yaml"
    protocol.write_text(PROTOCOL)
    landing = root / "landing"
    landing.mkdir(parents=True)
    runs, acknowledged = [], []
    for index, (month, paths) in enumerate(monthly_logs(base / "sim").items(), start=1):
        for path in paths:
            shutil.copy(path, landing / path.name)
        if index == 4:  # site-2 re-exports its January, corrected, declaring the file it replaces
            [january] = (landing / "processed").glob("*__site-2_2026-01.csv")
            table = pcsv.read_csv(january)
            key = january.name.split("__", 1)[0]
            pcsv.write_csv(table.append_column("supersedes", pa.array([key] * table.num_rows)), landing / "fix.csv")
        lines: list[str] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = monitor_run(root, protocol, out=lines.append, settle_seconds=0)
        if code == 3 and not acknowledged:  # the board acknowledges the first alert, from the command line
            [alert_id, *_] = [a["alert_id"] for a in alerts(Lake(root).read("monitor"))]
            said = run_cli(*ACK, "--lake", str(root), "--alert", alert_id, timeout=300)
            assert said.returncode == 0, said.stderr
            acknowledged.append(alert_id)
        receipt = base / f"receipt-{month}.json"
        shutil.copy(root / "monitor" / "receipt.json", receipt)
        runs.append((code, lines, decisions(Lake(root)), receipt))
    return root, runs, acknowledged


def test_every_monthly_run_succeeds_and_the_switched_site_alerts_after_the_switch(deployment):
    root, runs, _ = deployment
    codes = [code for code, *_ in runs]
    assert all(code in (0, 3) for code in codes), [lines for code, lines, *_ in runs if code not in (0, 3)]
    assert codes[: SWITCH - 1] == [0] * (SWITCH - 1)  # nothing alerts before the switch
    assert codes[-1] == 3
    monitor = Lake(root).read("monitor").to_pylist()
    alerting = {(r["site"], r["model_version"]) for r in monitor if r["status"] == "alert"}
    assert ("site-3", "v2") in alerting and alerting <= {("site-3", "v2"), ("site-3", "all")}  # all: over its versions


def test_the_decision_record_keeps_each_looks_first_decision(deployment):
    _, runs, _ = deployment
    seen: dict[tuple, dict] = {}
    for _, _, record, _ in runs:
        for key, row in record.items():
            first = seen.setdefault(key, row)
            assert row == first, key  # a later run never rewrites a look's decision
        assert set(seen) <= set(record)  # and never drops one
    assert any(row["status"] == "alert" for row in seen.values())


def test_the_corrected_re_export_replaced_januarys_cases_instead_of_adding_them(deployment):
    root, runs, _ = deployment
    [landed] = [line for line in runs[3][1] if line.startswith("landed    fix.csv")]
    assert "partition" in landed
    [original] = (root / "landing" / "processed").glob("*__site-2_2026-01.csv")
    rows = pcsv.read_csv(original).num_rows
    january = [r for r in Lake(root).read("trend").to_pylist() if (r["site"], r["period"]) == ("site-2", "2026-01")]
    assert {r["model_version"] for r in january} == {"v1", "all"}
    counted = {(r["n"], r["n_clusters"]) for r in january if r["metric"] in ("J", "intervention_rate")}
    assert counted == {(rows, 20)}  # counted once, not twice


def test_the_report_and_its_pdf_name_the_alert_with_its_site_and_version(deployment):
    from tests.test_report_pdf import pdf_lines, pdf_rows

    root, _, acknowledged = deployment
    report = (root / "reports" / "report.md").read_text()
    lines = pdf_lines((root / "reports" / "report.pdf").read_bytes())
    for alert in alerts(Lake(root).read("monitor")):
        assert alert["alert_id"] in report
        [row] = [line for line in lines if line.startswith(alert["alert_id"] + " ")]
        assert re.match(rf"{alert['alert_id']} +\| site-3 +\| {alert['model_version']} +\|", row), row
    [ack] = Lake(root).read("monitor_acknowledgements").to_pylist()  # kept through every later run
    assert (ack["alert_id"], ack["recorded_by"]) == (acknowledged[0], "Dr A. Ngata")
    assert "acknowledged by Dr A. Ngata" in report
    [acked] = [row for row in pdf_rows(lines) if row[0] == acknowledged[0] and row[-1].startswith("acknowledged by")]
    assert acked[1:3] == ["site-3", ack["model_version"]] and "Dr A. Ngata" in acked[-1], acked
    [criterion] = [row for row in pdf_rows(lines) if row[0] == "C1"]  # the protocol's one rule
    assert "FIRED: site-3 / v2 at look" in criterion[-1], criterion


def test_each_monthly_runs_receipt_is_kept_and_the_first_the_corrected_and_the_last_verify(deployment, tmp_path):
    """Every pass keeps its own receipt (monitor/receipts/<run>.json), each naming the files landed to
    date in landing order; re-deriving one is a whole replay of its landings, so three of the twelve are
    verified here: the first, the one with the correction, the last."""
    import json

    from autheval.reporting.receipt import verification_lines, verify

    root, runs, _ = deployment
    kept = sorted((root / "monitor" / "receipts").glob("monitor-*.json"))
    assert len(kept) == len(runs)
    landed = [sum(a == "--land" for a in json.loads(r.read_text())["argv"]) for _, _, _, r in runs]
    assert landed == sorted(landed) and landed[0] == SITES and landed[-1] == SITES * MONTHS + 1  # + the fix
    for _, _, _, receipt in (runs[0], runs[3], runs[-1]):
        (tmp_path / receipt.stem).mkdir()
        result = verify(receipt, workdir=tmp_path / receipt.stem)
        assert result.identical, verification_lines(result)


def test_the_ui_in_a_real_browser_shows_every_monthly_run_and_the_alert(deployment, tmp_path):
    """`autheval ui` on the lake after the twelve cron passes: the runs the passes made are in its history,
    `monitor` is materialized by the last recurring run and its check failed (the alert is in force)."""
    import os

    from tests.test_ui import browse, chromium, graphql, serving

    if not chromium():
        pytest.skip("Chromium is not installed (Debian package `chromium`; .ci/run installs it)")
    root, runs, _ = deployment
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    with serving(root, tmp_path / "ui.log", env) as base:
        data = graphql(
            base,
            """{ runsOrError { ... on Runs { results { runId jobName status } } }
                 assetNodeOrError(assetKey: {path: ["monitor"]}) { ... on AssetNode { assetChecksOrError {
                   ... on AssetChecks { checks { name executionForLatestMaterialization { runId status } } } } } } }""",
        )
        recurring = [r for r in data["runsOrError"]["results"] if r["jobName"] == "recurring_evaluation"]
        assert len(recurring) == len(runs) and {r["status"] for r in recurring} == {"SUCCESS"}
        latest = recurring[0]["runId"]  # newest first
        [check] = data["assetNodeOrError"]["assetChecksOrError"]["checks"]
        assert check["executionForLatestMaterialization"] == {"runId": latest, "status": "FAILED"}
        page = browse(f"{base}/assets/monitor", "--dump-dom").stdout
        assert ">Latest materialization<" in page and latest[:8] in page
        assert "Never materialized" not in page and "Join the Dagster community" not in page
