"""The trained proposer in the lake (issue 32, part 3): with ModelsResource.morph_task the lake's
fine-tune learns the morphology task's completions (models/morph_task.py, the recipe of
models/morph_training.py) and GRPO moves the MAVIC reward from it; both mechanisms' proposals enter the
lake like every other mechanism, and `transfer` holds the base scorer's mechanisms, the SFT and the
GRPO mechanism with their benchmark accuracy beside Delta_authority.

One seeded lake of a synthetic cohort of 160 images of 64 x 48 pixels (tiny-gemma3-morph, seed 0, SFT 120 steps, GRPO
GRPO_STEPS steps): the held-out reward at the last step exceeds the step 0 reward (the SFT model) by
GRPO_MARGIN, below the smallest gain the curves measured (docs/models.md: 0.45 to 0.72 by step 24 over
seeds 0, 1, 2; seed-to-seed spread 0.16 at the start)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("trl")

slow = pytest.mark.slow  # the lake: about a minute and a half on 2 shared cores (still part of make test)
BASE, SFT, GRPO = "VLM readout", "VLM LoRA fine-tuned", "VLM GRPO (MAVIC)"
GRPO_STEPS = 16
GRPO_MARGIN = 0.15  # held-out reward gain over GRPO_STEPS steps, above the spread where it starts


@pytest.fixture(scope="module")
def morph_lake(tmp_path_factory):
    from assets.resources import ModelsResource, SourceResource
    from autheval.raw.synth import synth_cohort
    from dagster_project.demo import COHORT_STAGES, run_stages
    from warehouse.lake import Lake

    root = tmp_path_factory.mktemp("morph-lake")
    cohort = synth_cohort(160, root / "cohort", seed=3, size=(64, 48))
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, min_group_clusters=8)
    models = ModelsResource(
        enabled=True, batch_size=16, device="cpu", finetune=True, grpo=True, grpo_max_steps=GRPO_STEPS, morph_task=True
    )
    checks = run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source, models=models)
    return Lake(root / "lake"), checks


@slow
def test_transfer_holds_the_base_sft_and_grpo_mechanisms_with_benchmark_and_gap(morph_lake):
    from warehouse.catalog import query

    lake, checks = morph_lake
    assert all(checks.values()), checks
    rows = query(lake, "select * from transfer").to_pylist()
    for mechanism in (BASE, SFT, GRPO):
        found = [r for r in rows if r["mechanism"] == mechanism]
        assert found, mechanism
        for row in found:
            assert row["benchmark_available"] and 0 <= row["benchmark_accuracy"] <= 1, row
            assert math.isfinite(row["Delta_authority"]), row
    producer = query(lake, "select distinct producer from proposals where mechanism = $m", {"m": GRPO}).to_pylist()
    assert producer[0]["producer"].endswith("tiny-gemma3-morph+tiny-gemma3-morph-sft-grpo")


@slow
def test_grpo_proposals_differ_from_the_fine_tunes_and_the_contrast_is_not_zero(morph_lake):
    from warehouse.catalog import query

    lake, _ = morph_lake
    changed = query(
        lake,
        "select count(*) as n from proposals as g join proposals as s using (image_id) "
        "where g.mechanism = $grpo and s.mechanism = $sft "
        "and (g.p_very_low <> s.p_very_low or g.p_low <> s.p_low or g.p_moderate <> s.p_moderate "
        "or g.p_high <> s.p_high)",
        {"grpo": GRPO, "sft": SFT},
    ).to_pylist()
    assert changed[0]["n"] > 0
    contrasts = query(
        lake, "select contrast, difference from contrasts where contrast like $c", {"c": f"{GRPO} / % minus {SFT} / %"}
    ).to_pylist()
    assert contrasts and any(abs(c["difference"]) > 0 for c in contrasts), contrasts


@slow
def test_grpo_steps_show_the_reward_rising_from_the_sft_model(morph_lake):
    from warehouse.catalog import query

    lake, _ = morph_lake
    steps = query(lake, "select * from grpo_steps order by step").to_pylist()
    assert [s["step"] for s in steps] == list(range(GRPO_STEPS + 1))  # step 0: the SFT model, before any update
    trained = steps[1:]
    assert all(s["reward"] is not None and s["r_fmt"] is not None for s in trained)
    assert max(s["reward"] for s in trained) > 0 and max(s["kl"] for s in trained) > 0
    evaluated = [s for s in steps if s["heldout_reward"] is not None]
    assert evaluated[0]["step"] == 0 and evaluated[-1]["step"] == GRPO_STEPS
    assert evaluated[-1]["heldout_reward"] > evaluated[0]["heldout_reward"] + GRPO_MARGIN, evaluated
    assert "mavic" in steps[0]["reward_form"] and steps[0]["seed"] == 0


def test_a_diagnosis_without_planted_attributes_is_one_line_naming_the_column():
    import pyarrow as pa

    from autheval.errors import RecordError
    from models.morph_task import planted_rows

    rows = pa.table({"image_id": ["a", "b"], "reference_diagnosis": ["MEL", "UNK" * 50]})
    with pytest.raises(RecordError, match=r"column 'reference_diagnosis': 'UNKUNK.*has no planted attributes.* \(b\)$"):
        planted_rows(rows)


@pytest.mark.parametrize(
    "flags, flag",
    [(["--no-models", "--morph"], "--no-models"), (["--source", "reference", "--morph"], "--morph")],
)
def test_demo_morph_flag_is_checked_before_anything_runs(tmp_path, flags, flag):
    from tests.conftest import run_cli

    source = [] if "--source" in flags else ["--source", "synthetic"]
    result = run_cli("demo", *source, "--lake", str(tmp_path / "lake"), *flags)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"autheval: error: {flag}")
    assert not (tmp_path / "lake").exists()


def test_no_items_keep_the_task_columns():
    """A split without images (a small cohort's validation) still has the columns the fine-tune reads."""
    import pyarrow as pa

    from models.morph_task import planted_rows

    empty = pa.table({"image_id": pa.array([], pa.string()), "reference_diagnosis": pa.array([], pa.string())})
    assert {"prompt", "completion"} <= set(planted_rows(empty).column_names)
