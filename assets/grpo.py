"""grpo and grpo_steps: the `VLM GRPO (MAVIC)` mechanism (DermoGPT section 6). The fine-tuned (SFT)
scorer, merged into one directory, gets a new LoRA adapter trained by GRPO on the MAVIC reward over
the train split (models/grpo.py); the SFT and GRPO adapters, concatenated into one adapter on the
original scorer, are then scored on the evaluated split by the same scorer as every model mechanism,
so `contrasts` holds it against `VLM LoRA fine-tuned` on identical clusters. `grpo_steps` is the run's log,
one row per optimizer step.

Runs only when ModelsResource.grpo is set (it trains on the fine-tune's adapter, so the fine-tune runs
too); otherwise both tables are empty and their metadata says why. With ModelsResource.morph_task the
run is the morphology task's (models/morph_training.py grpo_config, the planted attributes of
models/morph_task.py), which moves the reward on the tiny models, scored on validation images as it goes."""

from __future__ import annotations

import dataclasses

from dagster import multi_asset

from assets.common import PROPOSALS, connect_with, open_model_asset, table_spec, write_table
from assets.model_proposals import KINDS, _run_entry, adapter_proposals, morph_recipe, sft_adapter_dir
from assets.resources import LakeResource, ModelsResource, SourceResource
from autheval.vocabulary import PROPOSALS_SCHEMA
from models.grpo import (
    STEPS_SCHEMA,
    GrpoConfig,
    combine_adapters,
    grpo_train,
    grpo_training_run,
    merge_sft_adapter,
    steps_table,
)
from warehouse import sql

GRPO_MECHANISM = "VLM GRPO (MAVIC)"
GRPO_MISSING = "not run: GRPO is not configured (ModelsResource.grpo with finetune, autheval demo --grpo)"


@multi_asset(
    specs=[
        table_spec(
            "grpo",
            PROPOSALS,
            ["finetune", "images", "clusters"],
            "The 'VLM GRPO (MAVIC)' mechanism's proposals: a LoRA adapter (r 16, alpha 32) on the fine-tuned "
            "scorer trained by GRPO (TRL; group size 8, KL 0.1 to the fine-tuned model, lr 1e-6) on the MAVIC "
            "reward over the train split, then scored on the evaluated split (slate by probability). With "
            "ModelsResource.morph_task: the morphology task's recipe (2 images per step, KL 0.04, lr 3e-4, the "
            "diagnoses' planted attributes; models/morph_training.py). Runs only when ModelsResource.grpo is "
            "set; otherwise an empty table.",
            kinds=KINDS | {"trl"},
        ),
        table_spec(
            "grpo_steps",
            PROPOSALS,
            ["finetune", "images", "clusters"],
            "step, reward, reward_std, r_fmt, r_acc, s_hier, s_morph, gate (means over the step's completions), "
            "kl (to the reference policy), loss, lr, completion_tokens, frac_zero_std_groups, heldout_reward, "
            "heldout_r_fmt, heldout_r_acc, heldout_s_hier, heldout_s_morph (MAVIC on held-out items: with "
            "ModelsResource.morph_task the first 32 validation images at step 0 and every 4 steps; null where "
            "none are scored), seed, mechanism, "
            "model, model_revision, config, config_sha256, reward_form, data_sha256, engine, device, dtype, "
            "software_version: the GRPO run's log, one row per optimizer step.",
        ),
    ]
)
def grpo(context, lake: LakeResource, source: SourceResource, models: ModelsResource):
    missing = None if models.grpo and models.finetune else GRPO_MISSING
    outputs = {"grpo": PROPOSALS_SCHEMA, "grpo_steps": STEPS_SCHEMA}
    store, skipped = open_model_asset(lake, source, models, outputs, missing)
    if skipped:
        yield from skipped
        return
    con = connect_with(store, ["images", "clusters"])
    base = models.scorer_model(store)
    sft_adapter = sft_adapter_dir(store, base)
    merged = merge_sft_adapter(base, sft_adapter, store.root / "models" / "merged" / f"{base.name}-sft")
    adapters = store.root / "models" / "adapters"
    grpo_adapter = adapters / f"{merged.name}-grpo"
    train = sql.run(con, "proposals/grpo_examples", {"split": "train"})
    if models.morph_task:  # the planted attributes, the curves' recipe, MAVIC on the validation images
        from models.morph_task import planted_rows
        from models.morph_training import grpo_config

        recipe = morph_recipe(models)
        held_out = planted_rows(sql.run(con, "proposals/grpo_examples", {"split": "val"}), "GRPO held-out items")
        if not held_out.num_rows:  # a cohort without validation images: the training reward alone
            recipe = dataclasses.replace(recipe, eval_every=0)
        run = grpo_train(
            planted_rows(train),
            grpo_config(merged, grpo_adapter, recipe),
            held_out=held_out.slice(0, recipe.heldout_images) if held_out.num_rows else None,
        )
    else:
        config = GrpoConfig(
            model_dir=str(merged),
            adapter_dir=str(grpo_adapter),
            device=models.device_or_none(),
            max_steps=models.grpo_max_steps or None,
        )
        run = grpo_train(train, config)
    # base + one adapter (SFT and GRPO concatenated), as every model mechanism is scored
    adapter = combine_adapters(base, sft_adapter, run["adapter_dir"], adapters / f"{base.name}-sft-grpo")
    table, meta = adapter_proposals(con, store, source, models, base, adapter, GRPO_MECHANISM)
    context.log.info(f"GRPO: {run['steps']} steps on {run['device']}; scored {meta['images_scored']} images")
    runs = grpo_training_run(run).table(GRPO_MECHANISM, meta["model"], meta["revision"])
    summary = {k: v for k, v in run.items() if k != "step_log"}
    yield write_table(
        store,
        "grpo",
        table,
        {"adapter_dir": str(adapter), **_run_entry(runs)},
        asset_key="grpo",
        grpo=summary,
        scoring=meta,
        model=meta["model"],
        revision=meta["revision"],
    )
    yield write_table(
        store,
        "grpo_steps",
        steps_table(run, GRPO_MECHANISM, meta["model"], meta["revision"]),
        asset_key="grpo_steps",
        steps=run["steps"],
        config_sha256=run["config_sha256"],
    )
