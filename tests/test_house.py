"""The house: one stage plan (dagster_project.stages) that the jobs, the demo and the catalog's
dependencies follow, asset modules that import in any order, and the declared rules parsed once per
run and shown in the graph."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest
from dagster import AssetKey

import assets
from dagster_project.definitions import build_definitions
from dagster_project.stages import COMMIT, JOBS, STAGES
from tests.conftest import ROOT

ASSET_MODULES = sorted(f"assets.{m.name}" for m in pkgutil.iter_modules(assets.__path__))


@pytest.mark.parametrize("module", ASSET_MODULES)
def test_each_asset_module_imports_first(module):
    """Imported before anything else (a notebook, a test, a tool), then the demo: no circular import."""
    code = f"import {module}; import dagster_project.demo; import dagster_project; assert dagster_project.defs"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_catalog_depends_on_every_other_asset():
    graph = build_definitions("/nonexistent-lake").resolve_asset_graph()
    others = set(graph.get_all_asset_keys()) - {AssetKey(COMMIT)}
    assert set(graph.get(AssetKey(COMMIT)).parent_keys) == others
    assert not graph.get(AssetKey(COMMIT)).child_keys  # last in every run


def test_the_jobs_and_the_demo_follow_the_stage_plan():
    from dagster_project import demo

    defs = build_definitions("/nonexistent-lake")
    graph = defs.resolve_asset_graph()
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert set(STAGES) <= groups and groups - set(STAGES) == {"recurring"}
    for name, (stages, _) in JOBS.items():
        selected = defs.resolve_job_def(name).asset_layer.selected_asset_keys
        expected = {k for k in graph.get_all_asset_keys() if graph.get(k).group_name in stages} | {AssetKey(COMMIT)}
        assert set(selected) == expected, name
        assert list(stages) == [s for s in STAGES if s in stages], name  # in run order
    assert (demo.REFERENCE_STAGES, demo.RAW_STAGES, demo.COHORT_STAGES) == tuple(
        JOBS[j][0] for j in ("reference_study", "raw_path", "cohort_study")
    )


@pytest.fixture(scope="module")
def small_cohort(tmp_path_factory):
    from autheval.raw.synth import synth_cohort

    return synth_cohort(60, tmp_path_factory.mktemp("cohort"), seed=11, size=(160, 120))


@pytest.mark.parametrize("given", ["default", "path", "parsed"])
def test_a_cohort_run_parses_the_declared_rules_once(small_cohort, tmp_path, monkeypatch, given):
    """Every asset that applies or names the rules (contexts, selections, scores, estimates, subgroups)
    takes them from the one `rules` resource; the command line's checked RuleFile is not parsed again."""
    import autheval.review.rules
    from assets.resources import SourceResource
    from autheval.review.rules import default_rules_text, load_rules
    from dagster_project.demo import COHORT_STAGES, run_stages
    from warehouse.catalog import query
    from warehouse.lake import Lake

    path = tmp_path / "rules.yaml"
    path.write_text(default_rules_text())
    rules = {"default": None, "path": str(path), "parsed": load_rules(path)}[given]
    parses = []
    real = autheval.review.rules.parse_rules
    monkeypatch.setattr(autheval.review.rules, "parse_rules", lambda *a, **k: parses.append(a) or real(*a, **k))
    source = SourceResource(
        kind="synthetic",
        input_dir=str(small_cohort.root),
        workers=1,
        reps=50,
        evaluate_split="all",
        min_group_clusters=8,
    )
    checks = run_stages(tmp_path / "lake", COHORT_STAGES, out=lambda line: None, source=source, rules=rules)
    assert checks and all(checks.values()), checks
    assert len(parses) == (0 if given == "parsed" else 1)
    lake = Lake(tmp_path / "lake")
    sha = (rules if given == "parsed" else load_rules(rules)).sha256
    for table in ("contexts", "scores", "estimates", "subgroups"):
        assert query(lake, f"select distinct rule_sha256 as s from {table}").to_pylist() == [{"s": sha}], table  # noqa: S608 -- table from the fixed tuple above


def test_the_declared_rules_are_an_input_of_the_graph():
    graph = build_definitions("/nonexistent-lake").resolve_asset_graph()
    children = {k.to_user_string() for k in graph.get(AssetKey("declared_rules")).child_keys}
    assert {
        "contexts",
        "selections",
        "scores",
        "estimates",
        "contrasts",
        "intervals",
        "subgroups",
        "fairness",
    } <= children
