"""grpo and grpo_steps: the `VLM GRPO (MAVIC)` mechanism (DermoGPT section 6). The fine-tuned (SFT)
scorer, merged into one directory, gets a new LoRA adapter trained by GRPO on the MAVIC reward over
the train split (models/grpo.py); the SFT and GRPO adapters, concatenated into one adapter on the
original scorer, are then scored on the evaluated split by the same scorer as every model mechanism, so `contrasts` holds it against `VLM LoRA fine-tuned` on
identical clusters. `grpo_steps` is the run's log, one row per optimizer step.

Runs only when ModelsResource.grpo is set (it trains on the fine-tune's adapter, so the fine-tune runs
too); otherwise both tables are empty and their metadata says why."""

from __future__ import annotations

import pyarrow.compute as pc
from dagster import AssetSpec, multi_asset

from assets.common import PROPOSALS, connect_with, write_table
from assets.model_proposals import KINDS, _not_run, _run_entry, sft_adapter_dir
from assets.resources import LakeResource, ModelsResource, SourceResource
from autheval.proposals.proposals_file import as_contract
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
from models.scorer import ScorerConfig, proposals_from_scores, public_inputs, score_images
from warehouse import sql

GRPO_MECHANISM = "VLM GRPO (MAVIC)"


@multi_asset(
    specs=[
        AssetSpec(
            "grpo",
            group_name=PROPOSALS,
            kinds=KINDS | {"trl"},
            deps=["finetune", "images", "clusters"],
            description=(
                "The 'VLM GRPO (MAVIC)' mechanism's proposals: a LoRA adapter (r 16, alpha 32) on the fine-tuned "
                "scorer trained by GRPO (TRL; group size 8, KL 0.1 to the fine-tuned model, lr 1e-6) on the MAVIC "
                "reward over the train split, then scored on the evaluated split (slate by probability). Runs "
                "only when ModelsResource.grpo is set; otherwise an empty table."
            ),
        ),
        AssetSpec(
            "grpo_steps",
            group_name=PROPOSALS,
            kinds={"parquet"},
            deps=["finetune", "images", "clusters"],
            description=(
                "step, reward, reward_std, r_fmt, r_acc, s_hier, s_morph, gate (means over the step's completions), "
                "kl (to the reference policy), loss, lr, completion_tokens, frac_zero_std_groups, seed, mechanism, "
                "model, model_revision, config, config_sha256, reward_form, data_sha256, engine, device, dtype, "
                "software_version: the GRPO run's log, one row per optimizer step."
            ),
        ),
    ]
)
def grpo(context, lake: LakeResource, source: SourceResource, models: ModelsResource):
    store = lake.lake()
    reason = _not_run(models, source) or (
        None
        if models.grpo and models.finetune
        else "not run: GRPO is not configured (ModelsResource.grpo with finetune, autheval demo --grpo)"
    )
    if reason:
        yield write_table(
            store, "grpo", PROPOSALS_SCHEMA.empty_table(), {"status": reason}, asset_key="grpo", status=reason
        )
        yield write_table(
            store, "grpo_steps", STEPS_SCHEMA.empty_table(), {"status": reason}, asset_key="grpo_steps", status=reason
        )
        return
    con = connect_with(store, ["images", "clusters"])
    base = models.scorer_model(store)
    sft_adapter = sft_adapter_dir(store, base)
    merged = merge_sft_adapter(base, sft_adapter, store.root / "models" / "merged" / f"{base.name}-sft")
    adapters = store.root / "models" / "adapters"
    config = GrpoConfig(
        model_dir=str(merged),
        adapter_dir=str(adapters / f"{merged.name}-grpo"),
        device=models.device_or_none(),
        max_steps=models.grpo_max_steps or None,
    )
    run = grpo_train(sql.run(con, "proposals/grpo_examples", {"split": "train"}), config)
    # base + one adapter (SFT and GRPO concatenated), as every model mechanism is scored
    adapter = combine_adapters(base, sft_adapter, run["adapter_dir"], adapters / f"{base.name}-sft-grpo")
    inputs = sql.run(con, "proposals/model_scorer_inputs", {"split": source.evaluate_split}).filter(
        pc.field("evaluated")
    )
    scoring = ScorerConfig(
        model_dir=str(base), adapter_dir=str(adapter), batch_size=models.batch_size, device=models.device_or_none()
    )
    scores, meta = score_images(
        public_inputs(inputs.drop_columns(["evaluated"])), scoring, store.root / "cache" / "scorer", progress=False
    )
    context.log.info(f"GRPO: {run['steps']} steps on {run['device']}; scored {meta['images_scored']} images")
    table = as_contract(proposals_from_scores(scores, GRPO_MECHANISM, model=f"{base}+{adapter}"))
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
