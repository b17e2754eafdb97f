"""Model mechanisms in the lake (issue 9 item 7): a synthetic cohort with the tiny models enabled reaches
estimates for every mechanism (the file's three, VLM readout, CLIP probe, CCT single, CCT cc) under every
regime, with the paired contrast `CCT cc minus CCT single`; the scorer's cache makes a rerun score
nothing; with models disabled `proposals` holds the file's mechanisms only."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

pytest.importorskip("transformers")

from dagster import materialize

from assets.resources import ModelsResource, SourceResource
from dagster_project.definitions import build_definitions, project_instance, study_assets
from dagster_project.demo import COHORT_STAGES, QUIET, run_stages
from models.prompts import PROMPT_ID, PROMPT_TEMPLATE, PROMPT_VARIANTS, risk_prompt, variant_prompt_ids
from warehouse.catalog import query
from warehouse.lake import Lake

REGIMES = ("capacity_ceiling", "mixed", "safety_floor")
FILE_MECHANISMS = ("sharp_calibrated", "escalating", "diffuse")
MODEL_MECHANISMS = ("VLM readout", "CLIP probe", "CCT single", "CCT cc")
MODEL_TABLES = ("vlm_scores", "readout", "probe_features", "probe", "cct_arms", "finetune")


def cohort_source(cohort_root) -> SourceResource:
    return SourceResource(kind="synthetic", input_dir=str(cohort_root), workers=1, reps=200, min_group_clusters=8)


@pytest.fixture(scope="module")
def model_lake(tmp_path_factory):
    from autheval.raw.synth import synth_cohort

    root = tmp_path_factory.mktemp("model-lake")
    cohort = synth_cohort(90, root / "cohort", seed=11, size=(160, 120))
    source = cohort_source(cohort.root)
    models = ModelsResource(enabled=True, batch_size=16, device="cpu")
    checks = run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source, models=models)
    return Lake(root / "lake"), source, models, checks


def test_every_mechanism_reaches_estimates_under_every_regime(model_lake):
    lake, _, _, checks = model_lake
    assert all(checks.values()), checks
    analyses = {r["analysis"] for r in query(lake, "select distinct analysis from estimates").to_pylist()}
    assert analyses == {f"{m} / {r}" for m in FILE_MECHANISMS + MODEL_MECHANISMS for r in REGIMES}
    mechanisms = list(dict.fromkeys(lake.read("proposals").column("mechanism").to_pylist()))
    assert mechanisms == [*FILE_MECHANISMS, *MODEL_MECHANISMS]  # declared order: file first, then the models


def test_contrasts_include_cc_minus_single(model_lake):
    lake, _, _, _ = model_lake
    contrasts = {r["contrast"] for r in query(lake, "select contrast from contrasts").to_pylist()}
    for regime in REGIMES:
        assert f"CCT cc / {regime} minus CCT single / {regime}" in contrasts
    assert "CLIP probe / mixed minus VLM readout / mixed" in contrasts
    assert (
        "CCT cc / capacity_ceiling minus CCT single / capacity_ceiling"
        in (lake.root / "reports" / "report.md").read_text()
    )


def test_model_proposals_are_source_model_and_cover_the_evaluated_split(model_lake):
    lake, _, _, _ = model_lake
    rows = query(
        lake,
        "select mechanism, count(*) as n, count(distinct source) as sources, min(source) as source, "
        "count(diagnosis) as diagnoses, min(len(slate)) as slate from proposals "
        "where mechanism in ('VLM readout', 'CLIP probe', 'CCT single', 'CCT cc') "
        "group by mechanism",
    ).to_pylist()
    n_test = query(lake, "select count(*) as n from clusters where split = 'test'").to_pylist()[0]["n"]
    assert len(rows) == 4
    for row in rows:
        assert row["sources"] == 1 and row["source"] == "model" and row["diagnoses"] == 0 and row["slate"] == 4
        assert row["n"] == n_test, row
    for table in ("readout", "probe", "cct_arms"):
        assert query(lake, f"select distinct source from {table}").to_pylist() == [{"source": "model"}]  # noqa: S608 -- table from the fixed tuple above


def test_scores_cover_the_variants_each_mechanism_needs(model_lake):
    lake, _, models, _ = model_lake
    rows = query(
        lake,
        "select c.split, s.variant, count(*) as n, count(distinct s.prompt_id) as prompts "
        "from vlm_scores s join clusters c using (image_id) group by all order by all",
    ).to_pylist()
    splits = {(r["split"], r["variant"]) for r in rows}
    assert splits == {("val", 0)} | {("test", v) for v in range(models.variants)}  # no train image is scored
    assert all(r["prompts"] == 1 for r in rows)
    assert query(lake, "select count(distinct prompt_id) as n from vlm_scores").to_pylist() == [{"n": models.variants}]
    assert query(lake, "select count(*) as n from finetune").to_pylist() == [{"n": 0}]  # not configured


# Training facts in the lake (issue 16 item 3): model_runs, one long table, queried through the catalog.
RUN_SUMMARY = """
SELECT trainer, step_kind, count(*) AS n, count(DISTINCT step) AS steps,
       count(DISTINCT step) FILTER (WHERE chosen) AS chosen_steps, count(DISTINCT data_sha256) AS hashes,
       min(length(data_sha256)) AS hash_len, count(DISTINCT config) AS configs, min(config) AS config,
       min(mechanism) AS mechanism, min(model) AS model, min(model_revision) AS revision, min(seed) AS seed,
       min(software_version) AS software
FROM model_runs GROUP BY ALL ORDER BY ALL"""


def _run_summary(lake: Lake) -> dict:
    return {(r["trainer"], r["step_kind"]): r for r in query(lake, RUN_SUMMARY).to_pylist()}


def test_model_runs_name_each_trainers_data_config_and_choice(model_lake):
    import json

    from autheval import __version__
    from models.scorer import directory_sha256

    lake, _, models, _ = model_lake
    runs = _run_summary(lake)
    # the tiny cohort's validation design lacks levels 2 and 3: the readout is the published lock, and says so
    assert set(runs) == {
        ("gate_proxy", "candidate"),
        ("probe", "epoch"),
        ("probe", "lock"),
        ("readout", "published_lock"),
    }
    for key, run in runs.items():
        assert run["chosen_steps"] == 1, key  # one chosen C / epoch / candidate
        assert run["hashes"] == 1 and run["hash_len"] == 64, key  # the data it read, named
        assert run["configs"] == 1 and isinstance(json.loads(run["config"]), dict), key
        assert run["software"] == f"autheval {__version__}", key
    assert runs[("gate_proxy", "candidate")]["steps"] == 48 and runs[("probe", "epoch")]["steps"] == 80
    assert json.loads(runs[("probe", "epoch")]["config"])["epochs"] == 80
    assert "lacks level" in json.loads(runs[("readout", "published_lock")]["config"])["reason"]
    tower = models.vision_model(lake)
    probe_run = runs[("probe", "epoch")]
    assert (probe_run["model"], probe_run["revision"]) == (tower.name, directory_sha256(tower))
    scorer = query(lake, "select distinct model, revision from vlm_scores").to_pylist()
    assert scorer == [
        {
            "model": runs[("readout", "published_lock")]["model"],
            "revision": runs[("readout", "published_lock")]["revision"],
        }
    ]
    # the chosen rows are the ones the mechanisms used
    chosen_epoch = lake.read("probe").schema.metadata[b"chosen_epoch"].decode()
    assert query(lake, "select distinct step from model_runs where trainer = 'probe' and chosen").to_pylist() == [
        {"step": int(chosen_epoch)}
    ]
    assert query(
        lake,
        "select count(*) as tau from model_runs where trainer = 'probe' and step_kind = 'lock' and metric like 'tau_%'",
    ).to_pylist() == [{"tau": 3}]
    gate = query(
        lake,
        "select r.metric, r.value, s.alpha, s.temperature, s.data_sha256 = r.data_sha256 as same_data "
        "from model_runs r, gate_proxy_selection s where r.trainer = 'gate_proxy' and r.chosen "
        "and s.selected and r.metric in ('alpha', 'temperature') order by r.metric",
    ).to_pylist()
    assert [(g["metric"], g["value"]) for g in gate] == [
        ("alpha", gate[0]["alpha"]),
        ("temperature", gate[0]["temperature"]),
    ]
    assert all(g["same_data"] for g in gate)


def test_reference_demo_model_runs_is_empty_with_its_schema(tmp_path):
    from models.training_runs import SCHEMA

    run_stages(
        tmp_path / "lake",
        ("ingest", "proposals"),
        out=lambda line: None,
        extra=("catalog",),
        models=ModelsResource(enabled=True),
    )  # the reference study trains nothing, even when asked
    lake = Lake(tmp_path / "lake")
    assert lake.read("model_runs").schema == SCHEMA and lake.read("model_runs").num_rows == 0
    empty = query(lake, "select * from model_runs")
    assert empty.num_rows == 0 and empty.schema.names == SCHEMA.names


def test_a_reference_run_over_a_cohorts_lake_keeps_none_of_its_training_runs(model_lake, tmp_path):
    """gate_proxy_selection (and the trained tables) left by a cohort are not the reference study's runs."""
    lake, _, _, _ = model_lake
    copy = Lake(tmp_path / "lake")
    shutil.copytree(lake.root, copy.root)
    assert copy.read("gate_proxy_selection").num_rows == 48
    _materialize(copy, SourceResource(), ModelsResource(enabled=True), "readout", "probe", "finetune", "model_runs")
    assert query(copy, "select count(*) as n from model_runs").to_pylist() == [{"n": 0}]


def _materialize(lake: Lake, source: SourceResource, models: ModelsResource, *names: str):
    defs = build_definitions(str(lake.root), source, models)
    return materialize(
        list(study_assets()),
        selection=list(names),
        resources=defs.resources,
        instance=project_instance(),
        run_config=QUIET,
    )


def test_a_rerun_of_the_scorer_scores_nothing(model_lake):
    lake, source, models, _ = model_lake
    result = _materialize(lake, source, models, "vlm_scores")
    meta = result.asset_materializations_for_node("vlm_scores")[0].metadata
    assert meta["images_scored"].value == 0
    assert meta["images_from_cache"].value == meta["scorings"].value > 0
    assert meta["device"].value is None  # the model was not even loaded


def test_models_disabled_gives_the_file_mechanisms_only(model_lake, tmp_path):
    lake, source, _, _ = model_lake
    copy = Lake(tmp_path / "lake")
    shutil.copytree(lake.root, copy.root)
    result = _materialize(
        copy,
        source,
        ModelsResource(enabled=False),
        "vlm_scores",
        "readout",
        "probe_features",
        "probe",
        "cct_arms",
        "finetune",
        "proposals",
        "model_runs",
    )
    for name in MODEL_TABLES:
        assert copy.read(name).num_rows == 0, name
        status = result.asset_materializations_for_node(name)[0].metadata["status"].value
        assert "disabled" in status, name
    from autheval.proposals.proposals_file import read_proposals

    assert set(copy.read("proposals").column("mechanism").to_pylist()) == set(FILE_MECHANISMS)
    assert (
        copy.read("proposals")
        .drop_columns(["producer", "producer_sha256"])
        .equals(read_proposals(source.proposals_file(), copy.read("images").column("image_id")))
    )
    assert set(_run_summary(copy)) == {("gate_proxy", "candidate")}  # the cohort's gate proxy was still fitted


def test_prompt_variants_are_declared_paraphrases_of_the_spec_prompt():
    assert PROMPT_VARIANTS[0] == (PROMPT_ID, PROMPT_TEMPLATE)
    ids = variant_prompt_ids(4)
    assert ids[0] == PROMPT_ID and len(set(ids)) == 4
    for prompt_id in ids:
        text = risk_prompt(55.0, "female", None, prompt_id)
        assert text.endswith("Public metadata: age=55.0, sex=female, anatomic_site=nan. Selected visual-risk category:")
        assert all(
            level in text
            for level in ("very low visual risk", "low visual risk", "moderate visual risk", "high visual risk")
        )
    assert risk_prompt(55.0, "female", None) == risk_prompt(55.0, "female", None, PROMPT_ID)
    with pytest.raises(ValueError, match="unknown prompt id"):
        risk_prompt(1, "male", "back", "no-such-prompt")
    with pytest.raises(ValueError, match="prompt variants"):
        variant_prompt_ids(len(PROMPT_VARIANTS) + 1)


def test_level_metrics_equal_scikit_learn_bit_for_bit():
    import warnings

    import numpy as np

    from models.level_metrics import _sklearn_level_metrics, level_metrics

    rng = np.random.default_rng(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns when a predicted level is absent from the truth
        for i in range(400):
            n, k = int(rng.integers(1, 50)), int(rng.integers(1, 5))
            truth = rng.integers(0, k, n)
            predicted = rng.integers(0, 4 if i % 2 else k, n)
            assert level_metrics(predicted, truth) == _sklearn_level_metrics(predicted, truth)


def test_the_fine_tune_runs_only_when_configured_and_is_its_own_mechanism(model_lake, tmp_path):
    lake, source, _, _ = model_lake
    copy = Lake(tmp_path / "lake")
    shutil.copytree(lake.root, copy.root)
    models = ModelsResource(enabled=True, finetune=True, finetune_max_steps=2, device="cpu")
    result = _materialize(copy, source, models, "finetune", "proposals", "model_runs")
    meta = result.asset_materializations_for_node("finetune")[0].metadata
    assert meta["finetune"].value["steps"] == 2 and (tmp_path / "lake" / "models" / "adapters").is_dir()
    assert meta["model"].value.endswith("+tiny-gemma3-lora")
    mechanisms = list(dict.fromkeys(copy.read("proposals").column("mechanism").to_pylist()))
    assert mechanisms == [*FILE_MECHANISMS, *MODEL_MECHANISMS, "VLM LoRA fine-tuned"]
    assert set(copy.read("finetune").column("source").to_pylist()) == {"model"}
    runs = _run_summary(copy)
    assert {k for k in runs if k[0] == "finetune"} == {("finetune", "step"), ("finetune", "epoch")}
    step, epoch = runs[("finetune", "step")], runs[("finetune", "epoch")]
    assert (step["steps"], step["chosen_steps"], epoch["chosen_steps"]) == (2, 1, 1)
    assert step["hash_len"] == 64 and step["config"] == epoch["config"] and '"max_steps": 2' in step["config"]
    assert (step["mechanism"], step["model"]) == ("VLM LoRA fine-tuned", meta["model"].value)
    losses = query(
        copy, "select step, value from model_runs where trainer = 'finetune' and metric = 'train_loss' order by step"
    ).to_pylist()
    assert [r["value"] for r in losses] == meta["finetune"].value["train_loss_per_step"]
    assert {k[0] for k in runs} == {"readout", "probe", "gate_proxy", "finetune"}  # the others kept


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--no-models", "--finetune"], "--no-models"),
        (["--scorer-dir", "/no/such/model"], "--scorer-dir"),
        (["--vision-dir", "/no/such/tower"], "--vision-dir"),
    ],
)
def test_demo_model_flags_are_checked_before_anything_runs(tmp_path, flags, flag):
    from tests.conftest import run_cli

    result = run_cli("demo", "--source", "synthetic", "--lake", str(tmp_path / "lake"), *flags)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"autheval: error: {flag}")
    assert not (tmp_path / "lake").exists()
    reference = run_cli("demo", "--lake", str(tmp_path / "lake"), "--scorer-dir", str(tmp_path))
    assert reference.returncode == 2 and "--scorer-dir" in reference.stderr


def test_the_readout_falls_back_to_the_published_lock_and_says_why():
    from models.readout import cohort_readout, published_lock

    rows = [
        {
            "image_id": f"i{k}",
            "cluster_id": f"c{k}",
            "ideal_action_level": k % 2,
            "p_very_low": 0.4,
            "p_low": 0.3,
            "p_moderate": 0.2,
            "p_high": 0.1,
        }
        for k in range(12)
    ]  # levels 2 and 3 absent
    lock, meta = cohort_readout(pa.Table.from_pylist(rows))
    assert meta["trained"] is False and "lacks level" in meta["reason"]
    assert (lock.coef == published_lock().coef).all() and meta["chosen_C"] == 0.01


def test_the_models_resource_follows_the_environment(monkeypatch, tmp_path):
    from assets.resources import MODELS_ENV, SCORER_DIR_ENV, default_models

    monkeypatch.delenv(MODELS_ENV, raising=False)
    assert default_models().enabled is False
    assert build_definitions(str(tmp_path)).resources["models"].enabled is False
    monkeypatch.setenv(MODELS_ENV, "1")
    monkeypatch.setenv(SCORER_DIR_ENV, str(tmp_path))
    models = build_definitions(str(tmp_path)).resources["models"]
    assert models.enabled is True and models.finetune is False
    from dagster import build_resources

    with build_resources({"models": models}) as resources:
        assert resources.models.scorer_dir == str(tmp_path)


# Model-made proposals under a proposals file's rules (issue 21 item 2): each broken row, one line naming
# the mechanism and the model, and the proposals-file validator refuses the same row.
BROKEN_PROPOSALS = {
    "nan probabilities": ({"p": [float("nan")] * 4}, "finite"),
    "infinite probability": ({"p": [float("inf"), 0.0, 0.0, 0.0]}, "finite"),
    "negative probability": ({"p": [1.2, -0.2, 0.0, 0.0]}, "negative"),
    "sum off by 1e-5": ({"p": [0.4, 0.3, 0.2, 0.09999]}, "sum to 1 within 1e-6"),
    "repeated action": ({"slate": ["a1", "a1", "a2", "a0"]}, "distinct actions"),
    "three actions": ({"slate": ["a1", "a2", "a0"]}, "distinct actions"),
    "head not first": ({"a_head": "a2"}, "first action of the slate"),
    "duplicate image": ({"image_id": "i0"}, "duplicate"),
}


def _proposal_rows(change: dict) -> pa.Table:
    from autheval.vocabulary import MODEL_PROPOSALS_SCHEMA as PROPOSALS_SCHEMA

    rows = [
        {
            "mechanism": "CLIP probe",
            "image_id": f"i{k}",
            "slate": ["a1", "a2", "a0", "a3"],
            "a_head": "a1",
            "p_very_low": 0.2,
            "p_low": 0.5,
            "p_moderate": 0.2,
            "p_high": 0.1,
            "source": "model",
        }
        for k in range(3)
    ]
    broken = rows[2]
    for key, value in change.items():
        if key == "p":
            broken.update(zip(("p_very_low", "p_low", "p_moderate", "p_high"), value))
        else:
            broken[key] = value
            if key == "slate":
                broken["a_head"] = value[0]
    return pa.Table.from_pylist(rows, schema=PROPOSALS_SCHEMA)


@pytest.mark.parametrize("case", sorted(BROKEN_PROPOSALS))
def test_model_made_proposals_meet_the_proposals_file_rules(case):
    from autheval.proposals.proposals_file import proposals_from_table
    from autheval.proposals.slates import check_proposals

    change, rule = BROKEN_PROPOSALS[case]
    table = _proposal_rows(change)
    with pytest.raises(ValueError) as err:
        check_proposals(table, model="/models/tiny-clip-vision")
    message = str(err.value)
    assert rule in message and "'CLIP probe'" in message and "/models/tiny-clip-vision" in message, message
    assert "\n" not in message
    with pytest.raises(ValueError):  # the same row is refused in a proposals file
        proposals_from_table(table.drop_columns(["source"]), "proposals.csv")
    assert check_proposals(_proposal_rows({})).num_rows == 3


def test_slate_levels_outside_the_actions_are_refused():
    import numpy as np

    from autheval.proposals.slates import proposals_table

    with pytest.raises(ValueError, match="slate levels must be 0..3.*image 'b'"):
        proposals_table("VLM readout", ["a", "b"], np.array([[0, 1, 2, 3], [4, 1, 2, 0]]), model="/models/m")
    with pytest.raises(ValueError, match="slate levels must be 0..3"):  # -1 would have become a3
        proposals_table("VLM readout", ["a"], np.array([[-1, 1, 2, 0]]))
