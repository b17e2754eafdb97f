"""GRPO on the MAVIC reward (models/grpo.py): the declared config and its one-line refusals; MAVIC as
TRL's reward function on hand-built completions; a few steps on the tiny models from a merged SFT
model, with finite logged rewards and KL and an adapter the scorer reads as its own mechanism; the
same seed giving the same log; and the asset in a synthetic lake, where `contrasts` holds the GRPO
mechanism against the fine-tuned one on identical clusters."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("trl")

from models.grpo import (
    MAVIC_COMPONENTS,
    STEPS_SCHEMA,
    GrpoConfig,
    MavicReward,
    grpo_examples,
    grpo_prompt,
    grpo_train,
    grpo_training_run,
    merge_sft_adapter,
    steps_table,
)
from models.tiny import ensure_tiny_model


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "tiny-models"
    return {kind: ensure_tiny_model(kind, root, seed=0) for kind in ("tiny-gemma3", "tiny-llava")}


def training_items(folder: Path, n: int, diagnoses=("MEL", "NV", "BCC", "BKL")) -> pa.Table:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
        rows.append(
            {
                "image_id": f"img{i}",
                "image_path": str(path),
                "age": 50.0 + i,
                "sex": "male",
                "anatomic_site": "back",
                "reference_diagnosis": diagnoses[i % len(diagnoses)],
                "reference_attributes": json.dumps({"streaks": "irregular"} if i % 2 else {}),
                "modality": "dermoscopic",
                "ideal_action_level": i % 4,
            }
        )
    return pa.Table.from_pylist(rows)


def tiny_config(model_dir, adapter_dir, **overrides) -> GrpoConfig:
    settings = dict(
        model_dir=str(model_dir),
        adapter_dir=str(adapter_dir),
        group_size=4,
        max_steps=3,
        max_completion_tokens=12,
        device="cpu",
    )
    return GrpoConfig(**{**settings, **overrides})


# --- the declared config -------------------------------------------------------------------------------


def test_the_config_defaults_are_the_papers_grpo_stage():
    config = GrpoConfig(model_dir="m", adapter_dir="a")
    assert (config.group_size, config.kl_coef, config.lr, config.lora_r, config.lora_alpha) == (8, 0.1, 1e-6, 16, 32)
    assert config.loss_type == "grpo" and len(config.sha256()) == 64
    assert config.sha256() != GrpoConfig(model_dir="m", adapter_dir="a", kl_coef=0.2).sha256()


@pytest.mark.parametrize(
    "field, value",
    [
        ("group_size", 1),
        ("kl_coef", -0.1),
        ("lr", 0.0),
        ("lr", float("nan")),
        ("lora_r", 0),
        ("clip_epsilon", 1.5),
        ("max_steps", 0),
        ("loss_type", "ppo"),
        ("temperature", float("inf")),
        ("batch_size", 4),  # not a field: a misspelt setting is refused, not ignored
    ],
)
def test_a_bad_config_value_is_one_line_naming_the_field(field, value):
    with pytest.raises(ValueError) as caught:
        GrpoConfig(model_dir="m", adapter_dir="a", **{field: value})
    message = str(caught.value)
    assert message.startswith(f"GrpoConfig.{field}: ") and "\n" not in message


def test_training_items_with_bad_labels_are_refused(tmp_path):
    from autheval.errors import RecordError

    table = training_items(tmp_path, 2)
    with pytest.raises(RecordError, match="reference_attributes"):
        at = table.schema.get_field_index("reference_attributes")
        grpo_examples(table.set_column(at, "reference_attributes", pa.array(["{}", "[1, 2]"])))
    with pytest.raises(RecordError, match="modality"):
        grpo_examples(table.drop_columns(["modality"]))


def test_heldout_evaluation_needs_heldout_items_and_the_reward_sign_is_plus_or_minus_one(tmp_path):
    """Issue 32: eval_every without held-out items, a sign other than 1 or -1 and a negative eval_every
    are refused in one line before any model is loaded."""
    items = training_items(tmp_path / "images", 2)
    with pytest.raises(ValueError, match="eval_every needs held-out items"):
        grpo_train(items, tiny_config(tmp_path / "no-model", tmp_path / "adapter", eval_every=2))
    with pytest.raises(ValueError, match="GrpoConfig.eval_every: Input should be greater than or equal to 0"):
        tiny_config(tmp_path / "no-model", tmp_path / "adapter", eval_every=-1)
    with pytest.raises(ValueError, match="MavicReward.sign must be 1 or -1"):
        MavicReward(sign=0.5)
    assert not (tmp_path / "adapter").exists()


# --- MAVIC as the reward -------------------------------------------------------------------------------


def test_mavic_scores_trl_completions_and_logs_its_components():
    from models.mavic import score_completions

    right = (
        '<morph>{"streaks": "irregular", "pigment_network": "atypical"}</morph><final_diagnosis>MEL</final_diagnosis>'
    )
    same_risk = '<morph>{"streaks": "irregular"}</morph><final_diagnosis>BCC</final_diagnosis>'
    texts = [right, same_risk, "MEL, I think", right.replace("</morph>", "")]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    logged = {}
    reward = MavicReward()
    rewards = reward(
        prompts=[None] * 4,
        completions=completions,
        image_id=["a"] * 4,
        modality=["dermoscopic"] * 4,
        reference_diagnosis=["MEL"] * 4,
        reference_attributes=['{"streaks": "irregular"}'] * 4,
        log_metric=logged.__setitem__,
    )
    expected = score_completions(texts, ["dermoscopic"] * 4, ["MEL"] * 4, [{"streaks": "irregular"}] * 4, ["a"] * 4)
    assert rewards == pytest.approx(expected["reward"].tolist())
    assert rewards[0] > rewards[1] > 0 and rewards[2] == rewards[3] == 0  # invalid formats score 0
    assert set(logged) == {f"mavic/{k}" for k in MAVIC_COMPONENTS}
    assert logged["mavic/r_fmt"] == pytest.approx(0.5) and reward.steps == [
        {k: logged[f"mavic/{k}"] for k in MAVIC_COMPONENTS}
    ]


def test_the_prompt_lists_the_schema_mavic_accepts():
    from models.mavic import default_schemas

    prompt = grpo_prompt(55.0, None, "back")
    assert all(name in prompt for name in default_schemas().schemas["derm7pt"].attributes)
    assert "<morph></morph>" in prompt and "<final_diagnosis></final_diagnosis>" in prompt
    assert prompt.endswith("age=55.0, sex=nan, anatomic_site=back.")


# --- a run on the tiny models ----------------------------------------------------------------------------


def _finite(values) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def test_grpo_on_the_merged_sft_model_logs_finite_rewards_and_its_adapter_scores(tiny_models, tmp_path):
    from models.finetune import FinetuneConfig, finetune_proposer
    from models.scorer import ScorerConfig, proposals_from_scores, public_inputs, score_images

    base = tiny_models["tiny-gemma3"]
    items = training_items(tmp_path / "images", 4)
    sft = tmp_path / "sft-adapter"
    finetune_proposer(
        items,
        items.slice(0, 1),
        FinetuneConfig(model_dir=str(base), adapter_dir=str(sft), max_steps=1, batch_size=2, lr=1e-2, device="cpu"),
    )
    merged = merge_sft_adapter(base, sft, tmp_path / "merged")
    inputs = public_inputs(items.select(["image_id", "image_path", "age", "sex", "anatomic_site"]))
    # the merged model is the fine-tuned one: the same scores as base + SFT adapter
    with_adapter, _ = score_images(
        inputs,
        ScorerConfig(model_dir=str(base), adapter_dir=str(sft), device="cpu"),
        tmp_path / "cache",
        progress=False,
    )
    as_merged, _ = score_images(
        inputs, ScorerConfig(model_dir=str(merged), device="cpu"), tmp_path / "cache", progress=False
    )
    for level in ("ll_very_low", "ll_high"):
        assert np.allclose(with_adapter.column(level).to_numpy(), as_merged.column(level).to_numpy(), atol=1e-5)
    assert merge_sft_adapter(base, sft, tmp_path / "merged") == merged  # the same inputs: reused

    config = tiny_config(merged, tmp_path / "grpo-adapter")
    run = grpo_train(items, config)
    assert run["steps"] == 3 and [s["step"] for s in run["step_log"]] == [1, 2, 3]
    for name in (*MAVIC_COMPONENTS, "kl", "loss", "lr"):
        assert _finite(s[name] for s in run["step_log"]), name
    assert run["reward_form"].startswith("mavic gated: r_fmt * (r_acc")
    table = steps_table(run, "VLM GRPO (MAVIC)", "m", "rev")
    assert table.schema == STEPS_SCHEMA and table.num_rows == 3
    assert set(table.column("config_sha256").to_pylist()) == {config.sha256()}
    facts = grpo_training_run(run).table("VLM GRPO (MAVIC)")
    assert {"kl", "r_fmt", "s_morph", "reward"} <= set(facts.column("metric").to_pylist())

    scored, meta = score_images(
        inputs,
        ScorerConfig(model_dir=str(merged), adapter_dir=run["adapter_dir"], device="cpu"),
        tmp_path / "cache",
        progress=False,
    )
    assert meta["model"].endswith("merged+grpo-adapter")
    proposals = proposals_from_scores(scored, "VLM GRPO (MAVIC)")
    assert proposals.num_rows == 4 and set(proposals.column("mechanism").to_pylist()) == {"VLM GRPO (MAVIC)"}
    # the scorer refuses the GRPO adapter on another base (here: the base without the SFT merged in)
    from autheval.errors import RecordError

    with pytest.raises(RecordError, match="another base model"):
        score_images(
            inputs,
            ScorerConfig(model_dir=str(base), adapter_dir=run["adapter_dir"], device="cpu"),
            tmp_path / "cache",
            progress=False,
        )


def vowel_share(prompts, completions, **_):
    """A reward with a spread on a random model's completions (MAVIC gives a random model 0 for all)."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch in "aeiou" for ch in t) / max(len(t), 1) for t in texts]


def sft_merged(base, items, folder: Path) -> tuple[Path, Path]:
    from models.finetune import FinetuneConfig, finetune_proposer

    sft = folder / "sft-adapter"
    finetune_proposer(
        items,
        items.slice(0, 1),
        FinetuneConfig(model_dir=str(base), adapter_dir=str(sft), max_steps=1, batch_size=2, lr=1e-2, device="cpu"),
    )
    return sft, merge_sft_adapter(base, sft, folder / "merged")


def test_the_same_seed_gives_the_same_log_and_the_update_moves_the_policy(tiny_models, tmp_path):
    from safetensors.torch import load_file

    from models.grpo import combine_adapters
    from models.scorer import ScorerConfig, public_inputs, score_images

    base = tiny_models["tiny-llava"]  # its completions differ within a group (the tiny Gemma3's rarely do)
    items = training_items(tmp_path / "images", 3)
    sft, model = sft_merged(base, items, tmp_path)

    def log(seed, name):
        run = grpo_train(items, tiny_config(model, tmp_path / name, seed=seed, lr=1e-2), reward=vowel_share)
        return [(s["reward"], s["reward_std"], s["kl"], s["loss"]) for s in run["step_log"]], run

    first, run = log(7, "a")
    again, _ = log(7, "b")
    other, _ = log(8, "c")
    assert first == again
    assert first != other
    assert len({r for r, *_ in first}) > 1 and all(std > 0 for _, std, _, _ in first)
    assert first[0][2] == 0.0 and first[-1][2] > 0  # KL to the reference: none at the start, then the policy moved
    assert run["reward_form"] == "custom: vowel_share" and all(s["r_fmt"] is None for s in run["step_log"])
    trained = load_file(str(Path(run["adapter_dir"]) / "adapter_model.safetensors"))
    assert any(float(v.abs().max()) > 0 for k, v in trained.items() if "lora_B" in k)  # B starts at zero

    # one adapter on the original base: the SFT and GRPO adapters concatenated score as merged + GRPO
    combined = combine_adapters(base, sft, run["adapter_dir"], tmp_path / "combined")
    inputs = public_inputs(items.select(["image_id", "image_path", "age", "sex", "anatomic_site"]))
    on_base, _ = score_images(
        inputs,
        ScorerConfig(model_dir=str(base), adapter_dir=str(combined), device="cpu"),
        tmp_path / "cache",
        progress=False,
    )
    on_merged, _ = score_images(
        inputs,
        ScorerConfig(model_dir=str(model), adapter_dir=run["adapter_dir"], device="cpu"),
        tmp_path / "cache",
        progress=False,
    )
    only_sft, _ = score_images(
        inputs, ScorerConfig(model_dir=str(model), device="cpu"), tmp_path / "cache", progress=False
    )
    for level in ("ll_very_low", "ll_low", "ll_moderate", "ll_high"):
        assert np.allclose(on_base.column(level).to_numpy(), on_merged.column(level).to_numpy(), atol=1e-5)
        assert not np.allclose(on_merged.column(level).to_numpy(), only_sft.column(level).to_numpy(), atol=1e-5)
    from autheval.errors import RecordError

    other = tmp_path / "other-sft"  # another SFT adapter of the same base (here: one file changed)
    shutil.copytree(sft, other)
    (other / "README.md").write_text("another adapter\n")
    with pytest.raises(RecordError, match="not trained on this base merged with this SFT adapter"):
        combine_adapters(base, other, run["adapter_dir"], tmp_path / "wrong")


# --- the asset in a lake ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grpo_lake(tmp_path_factory):
    from assets.resources import ModelsResource, SourceResource
    from autheval.raw.synth import synth_cohort
    from dagster_project.demo import COHORT_STAGES, run_stages
    from warehouse.lake import Lake

    root = tmp_path_factory.mktemp("grpo-lake")
    cohort = synth_cohort(90, root / "cohort", seed=11, size=(160, 120))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, min_group_clusters=8)
    models = ModelsResource(
        enabled=True, batch_size=16, device="cpu", finetune=True, finetune_max_steps=2, grpo=True, grpo_max_steps=2
    )
    checks = run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source, models=models)
    return Lake(root / "lake"), checks


def test_the_grpo_mechanism_is_contrasted_with_the_fine_tune_on_identical_clusters(grpo_lake):
    from warehouse.catalog import query

    lake, checks = grpo_lake
    assert all(checks.values()), checks
    mechanisms = list(dict.fromkeys(lake.read("proposals").column("mechanism").to_pylist()))
    assert mechanisms[-2:] == ["VLM LoRA fine-tuned", "VLM GRPO (MAVIC)"]
    contrasts = {r["contrast"] for r in query(lake, "select contrast from contrasts").to_pylist()}
    for regime in ("capacity_ceiling", "mixed", "safety_floor"):
        assert f"VLM GRPO (MAVIC) / {regime} minus VLM LoRA fine-tuned / {regime}" in contrasts
    same = query(
        lake,
        "select count(*) as n from (select image_id from proposals where mechanism = 'VLM GRPO (MAVIC)' "
        "except select image_id from proposals where mechanism = 'VLM LoRA fine-tuned')",
    ).to_pylist()
    assert same == [{"n": 0}]
    producer = query(lake, "select distinct producer from proposals where mechanism = 'VLM GRPO (MAVIC)'").to_pylist()
    assert producer[0]["producer"].endswith("tiny-gemma3+tiny-gemma3-sft-grpo")


def test_the_grpo_steps_are_a_lake_table_named_by_their_run(grpo_lake):
    from warehouse.catalog import query

    lake, _ = grpo_lake
    steps = query(lake, "select * from grpo_steps order by step").to_pylist()
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert all(math.isfinite(step[k]) for k in (*MAVIC_COMPONENTS, "kl", "loss", "lr"))
        assert step["mechanism"] == "VLM GRPO (MAVIC)" and len(step["config_sha256"]) == 64
        assert json.loads(step["config"])["group_size"] == 8 and step["seed"] == 20260710
        assert len(step["data_sha256"]) == 64 and step["software_version"].startswith("autheval ")
    runs = query(
        lake,
        "select count(*) as n, max(step) as last from model_runs where trainer = 'grpo' "
        "and metric = 'kl' and mechanism = 'VLM GRPO (MAVIC)'",
    ).to_pylist()
    assert runs == [{"n": 2, "last": 2}]


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--no-models", "--grpo"], "--no-models"),
        (["--grpo", "--grpo-steps", "-1"], "--grpo-steps"),
        (["--source", "reference", "--grpo"], "--grpo"),
    ],
)
def test_demo_grpo_flags_are_checked_before_anything_runs(tmp_path, flags, flag):
    from tests.conftest import run_cli

    result = run_cli(
        "demo", *([] if "--source" in flags else ["--source", "synthetic"]), "--lake", str(tmp_path / "lake"), *flags
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"autheval: error: {flag}")
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    "models, why",
    [
        ({"enabled": False}, "model mechanisms are disabled"),
        ({"enabled": True, "finetune": True}, "GRPO is not configured"),
        ({"enabled": True, "grpo": True}, "GRPO is not configured"),  # it trains on the fine-tune's adapter
    ],
)
def test_unconfigured_grpo_writes_empty_tables_and_says_why(tmp_path, models, why):
    from dagster import materialize

    from assets.resources import ModelsResource, SourceResource
    from dagster_project.definitions import build_definitions, project_instance, study_assets
    from dagster_project.demo import QUIET
    from warehouse.lake import Lake

    lake = Lake(tmp_path / "lake")
    defs = build_definitions(
        str(lake.root), SourceResource(kind="synthetic", input_dir=str(tmp_path)), ModelsResource(**models)
    )
    result = materialize(
        study_assets(),
        selection=["grpo", "grpo_steps"],
        resources=defs.resources,
        instance=project_instance(),
        run_config=QUIET,
    )
    for name, schema in (("grpo", None), ("grpo_steps", STEPS_SCHEMA)):
        meta = result.asset_materializations_for_node("grpo")
        status = {m.asset_key.to_user_string(): m.metadata["status"].value for m in meta}
        assert why in status[name]
        assert lake.read(name).num_rows == 0
        if schema is not None:
            assert lake.read(name).schema.remove_metadata() == schema


def test_grpo_follows_the_environment_and_brings_the_fine_tune(monkeypatch):
    from assets.resources import GRPO_ENV, MODELS_ENV, default_models

    monkeypatch.setenv(MODELS_ENV, "1")
    monkeypatch.delenv(GRPO_ENV, raising=False)
    assert default_models().grpo is False
    monkeypatch.setenv(GRPO_ENV, "1")
    models = default_models()
    assert models.grpo is True and models.finetune is True
