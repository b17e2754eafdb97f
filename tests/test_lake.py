"""The Dagster lake: the reference study materialized in-process, its checks, SQL access (landing and the
trend: tests/test_landing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, materialize

from dagster_project.definitions import build_definitions, study_assets
from dagster_project.demo import QUIET, run_stages
from tests.conftest import ROOT, run_cli
from warehouse.catalog import query
from warehouse.lake import Lake

TABLES = [
    "images",
    "image_hashes",
    "duplicates",
    "duplicate_report",
    "clusters",
    "proposals",
    "selections",
    "scores",
    "records",
    "estimates",
    "contrasts",
    "study_summary",
]


@pytest.fixture(scope="module")
def study_lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    checks = run_stages(root, out=lambda line: None)
    return root, checks


def test_every_table_is_parquet_and_a_catalog_view(study_lake):
    root, _ = study_lake
    lake = Lake(root)
    for name in TABLES:
        assert lake.table_path(name).exists(), name
        assert query(lake, f"select count(*) as n from {name}").to_pylist()[0]["n"] > 0  # noqa: S608 -- names from the fixed TABLES list
    assert (root / "reports" / "report.html").read_text().count("data:image/png;base64,") == 1
    assert "CLIP probe minus LLaVA-Med head" in (root / "reports" / "report.md").read_text()


def test_all_asset_checks_pass(study_lake):
    _, checks = study_lake
    expected = {
        "images_unique_ids",
        "clusters_unique_ids",
        "clusters_within_one_split",
        "clusters_context_constant",
        "proposals_match_frozen_heads",
        "scores_same_action_same_score",
        "estimates_gap_identity",
        "estimates_supported_by_record_level",
        "estimates_match_published_summary",
        "duplicate_report_matches_published",
        "scores_reproduced_by_declared_rules",
    }
    assert expected <= set(checks)
    assert all(checks.values()), checks


def test_reference_state_is_recovered_for_every_test_image(study_lake):
    root, _ = study_lake
    rows = query(
        Lake(root),
        "select risk_stratum, count(*) as n from images where risk_stratum is not null group by 1 order by 1",
    )
    assert {r["risk_stratum"]: r["n"] for r in rows.to_pylist()} == {
        "high": 871,
        "low": 392,
        "moderate": 652,
        "very_low": 2052,
    }


def test_reference_clusters_rederive_every_frozen_id(study_lake):
    root, _ = study_lake
    lake = Lake(root)
    row = query(
        lake,
        "select count(*) as n, count(distinct cluster_id) as g, count(*) filter (where split = 'test') as t,"
        " count(distinct split_source) as s from clusters",
    ).to_pylist()[0]
    assert row == {"n": 25331, "g": 13920, "t": 3967, "s": 1}
    exact = query(lake, "select count(distinct component_id) as g, count(*) as n from duplicates where threshold = 0")
    assert exact.to_pylist() == [{"g": 95, "n": 191}]


def test_synthetic_cohort_through_the_raw_path(tmp_path):
    from assets.resources import SourceResource
    from autheval.raw.synth import synth_cohort
    from dagster_project.demo import RAW_STAGES

    cohort = synth_cohort(60, tmp_path / "cohort", seed=7, size=(320, 240))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1)
    checks = run_stages(tmp_path / "lake", RAW_STAGES, out=lambda line: None, source=source, extra=("catalog",))
    assert checks and all(checks.values()), checks
    lake = Lake(tmp_path / "lake")
    assert query(lake, "select count(*) as n from images").to_pylist() == [{"n": 60}]
    assert query(lake, "select count(*) as n from ingest_report where reason = 'checksum_mismatch'").to_pylist() == [
        {"n": 0}
    ]
    crossing = query(
        lake, "select count(*) as n from (select cluster_id from clusters group by 1 having count(distinct split) > 1)"
    )
    assert crossing.to_pylist() == [{"n": 0}]
    planted = query(lake, "select count(*) as n from duplicates where threshold = 0").to_pylist()[0]["n"]
    assert planted >= 2  # the cohort's planted exact duplicates were found
    # the cohort's own proposals file is validated into the proposals contract
    materialize(
        study_assets(),
        selection=["proposals"],
        resources=build_definitions(str(tmp_path / "lake"), source).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
    )
    assert pq.read_schema(lake.table_path("proposals")).names == [
        "mechanism",
        "image_id",
        "slate",
        "a_head",
        "p_very_low",
        "p_low",
        "p_moderate",
        "p_high",
        "diagnosis",
        "source",
        "producer",
        "producer_sha256",
    ]
    # a cohort without a proposals file (the official ISIC files) stops there with the reason
    (cohort.root / "proposals.csv").unlink()
    with pytest.raises(Exception, match="no proposals for this cohort"):
        materialize(
            study_assets(),
            selection=["proposals"],
            resources=build_definitions(str(tmp_path / "lake"), source).resources,
            instance=DagsterInstance.ephemeral(),
            run_config=QUIET,
        )


def test_query_cli_answers_from_the_catalog(study_lake):
    root, _ = study_lake
    sql = (
        "select analysis, unit, metric, estimate, ci_lower, ci_upper from estimates "
        "where metric = 'Delta_authority' and analysis = 'mixed'"
    )
    result = run_cli("query", sql, "--lake", str(root), "--format", "csv")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "analysis,unit,metric,estimate,ci_lower,ci_upper" and len(lines) == 3
    assert any(line.startswith("mixed,image_weighted,Delta_authority,0.3744796004537") for line in lines)
    assert run_cli("query", "delete from estimates", "--lake", str(root)).returncode == 2


def test_definitions_load_with_schedule_sensor_and_checks():
    defs = build_definitions("/nonexistent-lake")
    assert {s.name for s in defs.schedules} == {"recurring_evaluation_schedule"}
    assert {s.name for s in defs.sensors} == {"landing_sensor", "monitor_alert_sensor"}
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert set(TABLES) | {"report", "catalog", "landed_records", "trend"} <= keys
    assert len(list(defs.resolve_asset_graph().asset_check_keys)) >= 10


def test_dg_check_defs():
    dg = Path(sys.executable).with_name("dg")
    if not dg.exists():
        pytest.skip("dagster-dg-cli is not installed")
    result = subprocess.run([str(dg), "check", "defs"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_crash_mid_write_keeps_the_previous_table_readable(study_lake, monkeypatch):
    root, _ = study_lake
    lake = Lake(root)
    before = lake.read("contrasts")

    def crash(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")
        raise RuntimeError("simulated crash while writing")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(Exception, match="simulated crash"):
        materialize(
            study_assets(),
            selection=["estimates", "contrasts", "intervals"],
            resources=build_definitions(str(root)).resources,
            instance=DagsterInstance.ephemeral(),
            run_config=QUIET,
        )
    monkeypatch.undo()
    assert lake.read("contrasts").equals(before)
    assert query(lake, "select count(*) as n from contrasts").to_pylist() == [{"n": 2}]
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


WRITER = """
import sys
from dagster_project.demo import run_stages
for _ in range(2):
    run_stages(sys.argv[1], stages=("estimates", "reports"), out=lambda line: None)
"""
READER = """
import sys, time
from warehouse.catalog import query
from warehouse.lake import Lake
lake, n = Lake(sys.argv[1]), 0
deadline = time.time() + float(sys.argv[2])
while time.time() < deadline:
    rows = query(lake, "select count(*) as n, count(distinct analysis) as a from estimates").to_pylist()[0]
    assert rows == {"n": 96, "a": 6}, rows
    n += 1
print(n)
"""


def test_two_writers_and_a_reader_at_once(study_lake):
    """One writer at a time: the second is refused in one line naming the first run, and a reader
    polling throughout sees whole snapshots only."""
    root, _ = study_lake
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    reader = subprocess.run([sys.executable, "-c", READER, str(root), "15"], env=env, capture_output=True, text=True)
    outs = [w.communicate(timeout=300) for w in writers]
    codes = sorted(w.returncode for w in writers)
    assert codes[0] == 0 and codes[1] != 0, [o[1][-2000:] for o in outs]
    refused = next(err for w, (_, err) in zip(writers, outs) if w.returncode)
    assert "LakeBusy: lake " in refused and "in use by run demo-" in refused, refused[-2000:]
    assert reader.returncode == 0, reader.stderr[-2000:]
    assert int(reader.stdout.strip()) > 5  # it really read, many times, while the writer wrote
    assert query(Lake(root), "select count(*) as n from estimates").to_pylist() == [{"n": 96}]


def test_a_second_writer_waits_when_told(study_lake):
    root, _ = study_lake
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTHEVAL_LAKE_WAIT": "300"}
    before = Lake(root).snapshot().snapshot
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=600) for w in writers]
    assert all(w.returncode == 0 for w in writers), [o[1][-2000:] for o in outs]
    assert Lake(root).snapshot().snapshot == before + 4  # two runs of two demos each, one after the other


def test_the_declared_rules_check_fails_when_the_rules_differ_from_the_study(study_lake, tmp_path):
    """The reference check is run by the rule engine, not read from the traces: other rules fail it."""
    from dagster import AssetCheckKey, AssetKey, AssetSelection

    from assets.resources import SourceResource
    from autheval.review.rules import default_rules_text

    root, checks = study_lake
    assert checks["scores_reproduced_by_declared_rules"] is True
    other = tmp_path / "rules.yaml"
    other.write_text(default_rules_text().replace("high: 4.0}", "high: 5.0}", 1))
    source = SourceResource(kind="reference")
    selection = AssetSelection.checks(AssetCheckKey(AssetKey("scores"), "scores_reproduced_by_declared_rules"))
    result = materialize(
        study_assets(),
        selection=selection,
        resources=build_definitions(str(root), source, rules=str(other)).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
        raise_on_error=False,
    )
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed is False
    assert evaluation.metadata["uz_rows_reproduced"].value < 16020


def test_bootstrap_and_delta_method_intervals_side_by_side(study_lake):
    root, _ = study_lake
    rows = query(
        Lake(root),
        "select interval_method, count(*) as n, count(ci_lower) as with_interval from intervals "
        "where analysis = 'mixed' group by 1 order by 1",
    ).to_pylist()
    assert [r["interval_method"] for r in rows] == ["bootstrap_reference", "delta_method"]
    assert rows[0]["n"] == rows[1]["n"] and rows[1]["with_interval"] > 0
    same = query(
        Lake(root),
        "select count(*) as n from intervals i join estimates e using (analysis, unit, metric) "
        "where i.interval_method = 'bootstrap_reference' and i.ci_lower is distinct from e.ci_lower",
    )
    assert same.to_pylist() == [{"n": 0}]  # the bootstrap rows are the estimates' own intervals
    methods = query(Lake(root), "select distinct interval_method from estimates").to_pylist()
    assert methods == [{"interval_method": "bootstrap_reference"}]  # named in every estimates row too
