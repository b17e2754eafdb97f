"""A raw cohort end to end: images -> clusters -> gate proxy -> contexts -> proposals (a file) ->
selections -> scores -> records -> estimates, paired contrasts, subgroups, fairness, report, catalog."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.resources import SourceResource
from dagster_project.demo import COHORT_STAGES, run_stages
from tests.conftest import run_cli
from warehouse.catalog import query
from warehouse.lake import Lake

REGIMES = ("capacity_ceiling", "mixed", "safety_floor")


@pytest.fixture(scope="module")
def cohort_lake(tmp_path_factory):
    from autheval.raw.synth import synth_cohort

    root = tmp_path_factory.mktemp("cohort")
    cohort = synth_cohort(150, root / "cohort", seed=7, size=(320, 240))
    source = SourceResource(
        kind="synthetic", input_dir=str(cohort.root), workers=1, reps=300, evaluate_split="all", min_group_clusters=8
    )
    checks = run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source)
    return Lake(root / "lake"), cohort, checks


def test_every_check_passes_and_every_mechanism_meets_every_regime(cohort_lake):
    lake, _, checks = cohort_lake
    assert {"contexts_complete", "selections_band_not_empty", "estimates_gap_identity"} <= set(checks)
    assert all(checks.values()), checks
    analyses = {r["analysis"] for r in query(lake, "select distinct analysis from estimates").to_pylist()}
    mechanisms = ("sharp_calibrated", "escalating", "diffuse")
    assert analyses == {f"{m} / {r}" for m in mechanisms for r in REGIMES}
    contrasts = query(lake, "select contrast, unit from contrasts").to_pylist()
    assert len(contrasts) == 3 * 3 * 2  # every pair of mechanisms within each regime, both units
    assert {"contrast": "diffuse / mixed minus escalating / mixed", "unit": "cluster_equal"} in contrasts


def test_rows_name_the_rule_file_and_records_carry_no_private_context(cohort_lake):
    lake, _, _ = cohort_lake
    for table in ("contexts", "selections", "scores", "records"):
        row = query(
            lake,
            f"select count(distinct rule_version) as v, min(rule_version) as name from {table}",  # noqa: S608 -- table from the fixed tuple above
        ).to_pylist()[0]
        assert row == {"v": 1, "name": "autheval-reference-1"}, table
    private = {"profile", "sens", "burden", "aversion", "capacity", "floor", "s_gate", "risk_bin"}
    assert not private & set(pq.read_schema(lake.table_path("records")).names)


def test_the_review_runs_on_the_declared_split_only(tmp_path):
    from autheval.raw.synth import synth_cohort

    cohort = synth_cohort(80, tmp_path / "cohort", seed=5, size=(320, 240))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, evaluate_split="test")
    run_stages(tmp_path / "lake", COHORT_STAGES, out=lambda line: None, source=source)
    lake = Lake(tmp_path / "lake")
    outside = query(
        lake, "select count(*) as n from records r join clusters c on c.image_id = r.case_id where c.split <> 'test'"
    ).to_pylist()
    assert outside == [{"n": 0}]
    assert query(lake, "select count(*) > 0 as any from records").to_pylist() == [{"any": True}]


def test_subgroups_and_fairness_are_tables(cohort_lake):
    lake, _, _ = cohort_lake
    groups = query(lake, "select grouping, count(distinct group_value) as g from subgroups group by 1").to_pylist()
    assert {g["grouping"] for g in groups} >= {"sex", "age_band", "profile"}
    assert query(lake, "select count(*) > 0 as any from fairness").to_pylist() == [{"any": True}]


def test_a_bad_proposals_file_is_one_line_and_the_lake_keeps_what_it_had(cohort_lake, tmp_path):
    lake, cohort, _ = cohort_lake
    before = {p: p.read_bytes() for p in lake.root.rglob("*.parquet")}
    served = lake.snapshot()
    assert before and served.snapshot > 0
    bad = tmp_path / "bad.csv"
    bad.write_text("mechanism,image_id,p_very_low,p_low,p_moderate,p_high\nm,x,0.5,0.5,0.5,0.5\n")
    result = run_cli(
        "demo", "--source", "synthetic", "--input", str(cohort.root), "--proposals", str(bad), "--lake", str(lake.root)
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"autheval: error: {bad}: column 'p_very_low': probabilities must sum to 1 within 1e-6 "
        "(row 1, image 'x', value '2.0')"
    )
    assert {p: p.read_bytes() for p in lake.root.rglob("*.parquet")} == before
    assert lake.snapshot() == served


@pytest.mark.parametrize(
    "table, check, spoil",
    [
        (
            "contexts",
            "contexts_complete",
            lambda t: t.set_column(t.schema.get_field_index("profile"), "profile", pa.nulls(t.num_rows, pa.string())),
        ),
        (
            "selections",
            "selections_band_not_empty",
            lambda t: t.set_column(
                t.schema.get_field_index("band_mask"),
                "band_mask",
                pa.array([0] * t.num_rows, t.schema.field("band_mask").type),
            ),
        ),
    ],
)
def test_the_review_checks_fail_on_a_bad_table(cohort_lake, tmp_path, table, check, spoil):
    import shutil

    from dagster import AssetCheckKey, AssetKey, AssetSelection, DagsterInstance, materialize

    from dagster_project.definitions import build_definitions, study_assets
    from dagster_project.demo import QUIET

    lake, cohort, _ = cohort_lake
    copy = Lake(tmp_path / "lake")
    shutil.copytree(lake.root, copy.root)
    copy.write(table, spoil(copy.read(table)))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1)
    result = materialize(
        study_assets(),
        selection=AssetSelection.checks(AssetCheckKey(AssetKey(table), check)),
        resources=build_definitions(str(copy.root), source).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
        raise_on_error=False,
    )
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed is False and int(evaluation.metadata["violations"].value) > 0
