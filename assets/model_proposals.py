"""The proposal mechanisms the lake runs itself (issue 9): the VLM likelihood scorer over K prompt
variants (`vlm_scores`), the action readout trained on its validation scores (`readout`), the linear
probe over a frozen vision tower (`probe_features`, `probe`), the CCT arms `single` and `cc` over the K
variants (`cct_arms`) and, when configured, a LoRA fine-tune of the scorer scored as its own mechanism
(`finetune`). Each asset calls one models/ function and writes its table; every proposals table is in
the `proposals` contract with source 'model', checked by the rules a proposals file meets (finite
probabilities summing to 1, a slate of distinct actions; autheval/proposals/slates.py check_proposals) before it is
written, and `proposals` appends them to the file's mechanisms.

Each trained mechanism's table carries its training run (data hash, config, seed, the facts it chose
from) in its Parquet metadata; `model_runs` gathers them, with the gate proxy's candidates, into one
long table a reviewer can query (models/training_runs.py).

With ModelsResource.enabled false (the default), or for the reference study (its proposals are
published traces), each writes an empty table and says why in its metadata; nothing loads torch."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from assets.common import PROPOSALS, connect_with, lake_query, model_asset, table_asset, write_table
from assets.resources import LakeResource, ModelsResource, SourceResource
from autheval.proposals.cct import cct_proposals, variant_table_from_scores
from autheval.proposals.proposals_file import as_contract, combine_proposals
from autheval.vocabulary import PROPOSALS_SCHEMA
from models import training_runs
from models.finetune import FinetuneConfig, finetune_proposer, finetune_training_run
from models.gate_proxy import training_run as gate_proxy_training_run
from models.probe import FEATURE_SCHEMA, ProbeConfig, feature_matrix, tower_features, train_probe_from_tables
from models.readout import cohort_readout, readout_proposals_table, readout_training_run
from models.scorer import (
    CACHE_SCHEMA,
    ScorerConfig,
    directory_sha256,
    proposals_from_scores,
    public_inputs,
    score_images,
    score_prompt_variants,
)
from warehouse import sql
from warehouse.lake import Lake

# The model mechanisms, in the order they are declared after the file's (later minus earlier in contrasts).
READOUT, PROBE, CCT_SINGLE, CCT_CC, FINETUNED = (
    "VLM readout",
    "CLIP probe",
    "CCT single",
    "CCT cc",
    "VLM LoRA fine-tuned",
)
MODEL_PROPOSAL_TABLES = ("readout", "probe", "cct_arms", "finetune", "grpo")  # grpo: assets/grpo.py
TRAINED_TABLES = ("readout", "probe", "finetune", "grpo")  # the proposals tables that carry a training run
SCORES_SCHEMA = CACHE_SCHEMA.append(pa.field("variant", pa.int32()))
KINDS = {"torch", "parquet"}
FINETUNE_MISSING = "not run: the fine-tune is not configured (ModelsResource.finetune, autheval demo --finetune)"


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@model_asset(
    SCORES_SCHEMA,
    ["images", "clusters"],
    "model, revision, prompt_id, variant, image_id, ll_very_low..ll_high, p_very_low..p_high, "
    "s_assistant, device, dtype: the VLM likelihood scorer (spec 5.1) per image and prompt variant; "
    "variant 0 (the spec prompt) on the validation and evaluated splits, variants 1..K-1 on the "
    "evaluated split. Resumable cache under <lake>/cache/scorer: a rerun scores nothing already done.",
    kinds=KINDS,
)
def vlm_scores(context, store: Lake, source: SourceResource, models: ModelsResource):
    inputs = lake_query(
        store, "proposals/model_scorer_inputs", ["images", "clusters"], {"split": source.evaluate_split}
    )
    config = ScorerConfig(
        model_dir=str(models.scorer_model(store)), batch_size=models.batch_size, device=models.device_or_none()
    )
    evaluated = inputs.filter(pc.field("evaluated")).column("image_id")
    table, meta = score_prompt_variants(
        public_inputs(inputs.drop_columns(["evaluated"])),
        config,
        store.root / "cache" / "scorer",
        models.variants,
        evaluated,
        progress=False,
    )
    context.log.info(
        f"scored {meta['images_scored']} image x prompt pairs ({meta['images_from_cache']} from the cache)"
    )
    return write_table(store, "vlm_scores", table, {"model": meta["model"], "revision": meta["revision"]}, **meta)


@model_asset(
    PROPOSALS_SCHEMA,
    [vlm_scores, "clusters", "images"],
    "The 'VLM readout' mechanism's proposals (spec 5.2): balanced multinomial logistic regression on the "
    "scorer's clipped log probabilities, trained and locked on the validation split (design/lock "
    "partition by hashed cluster order, grouped CV over C), applied to the evaluated split as ranked "
    "slates. Metadata: CV table, chosen C, lock metrics (or the published lock, and why).",
    kinds=KINDS | {"sklearn"},
)
def readout(context, store: Lake, source: SourceResource, models: ModelsResource):
    con = connect_with(store, ["vlm_scores", "clusters", "images"])
    lock, meta = cohort_readout(sql.run(con, "proposals/readout_training_scores"))
    evaluated = sql.run(con, "proposals/evaluated_vlm_scores", {"split": source.evaluate_split, "all_variants": False})
    table = as_contract(
        readout_proposals_table(evaluated, lock, mechanism=READOUT, model=str(models.scorer_model(store)))
    )
    model, revision = _first(evaluated, "model"), _first(evaluated, "revision")
    run = readout_training_run(meta).table(READOUT, model, revision)
    return write_table(
        store,
        "readout",
        table,
        {"lock": _json(lock.as_dict()), **_run_entry(run)},
        **{k: v for k, v in meta.items() if k != "lock"},
        lock=_json(meta["lock"]),
        model=model,
        revision=revision,
    )


def _first(table: pa.Table, column: str):
    return table.column(column)[0].as_py() if table.num_rows else None


def _run_entry(run: pa.Table) -> dict:
    """The Parquet metadata entry under which a proposals table carries its training run."""
    return {training_runs.METADATA_KEY: training_runs.encode(run)}


@model_asset(
    FEATURE_SCHEMA,
    ["images", "clusters"],
    "model, image_id, input_sha256, feature: pooled features of the frozen vision tower (tiny CLIP vision "
    "unless ModelsResource.vision_dir names one) for the train, validation and evaluated images; resumable "
    "cache under <lake>/cache/probe, keyed also by the SHA-256 of the image bytes.",
    kinds=KINDS,
)
def probe_features(context, store: Lake, source: SourceResource, models: ModelsResource):
    inputs = lake_query(store, "proposals/probe_inputs", ["images", "clusters"], {"split": source.evaluate_split})
    table, meta = tower_features(
        inputs,
        models.vision_model(store),
        store.root / "cache" / "probe",
        batch_size=max(models.batch_size, 64),
        device=models.device_or_none(),
    )
    context.log.info(f"extracted {meta['images_extracted']} images ({meta['images_from_cache']} from the cache)")
    return write_table(store, "probe_features", table, {"model": meta["model_key"]}, **meta)


@model_asset(
    PROPOSALS_SCHEMA,
    [probe_features, "clusters", "images"],
    "The 'CLIP probe' mechanism's proposals (spec 5.4): a linear probe on the frozen tower's features, "
    "trained with torch on train, epoch chosen and tau fitted on validation, applied to the evaluated "
    "split (nearest-level slates of the thresholded head). Metadata: epoch table, chosen epoch, tau.",
    kinds=KINDS,
)
def probe(context, store: Lake, source: SourceResource, models: ModelsResource):
    con = connect_with(store, ["probe_features", "clusters", "images"])
    config = ProbeConfig(device=models.device_or_none())
    features = store.read("probe_features")
    fit = train_probe_from_tables(features, sql.run(con, "proposals/model_labels"), config)
    evaluated = sql.run(con, "proposals/evaluated_probe_features", {"split": source.evaluate_split})
    tower = models.vision_model(store)
    table = as_contract(
        fit.proposals(evaluated.column("image_id").to_pylist(), feature_matrix(evaluated), PROBE, model=str(tower))
    )
    run = fit.training_run().table(PROBE, tower.name, directory_sha256(tower))
    return write_table(
        store,
        "probe",
        table,
        {"chosen_epoch": str(fit.chosen_epoch), **_run_entry(run)},
        **fit.metadata(),
        model=_first(features, "model"),
    )


@model_asset(
    PROPOSALS_SCHEMA,
    [vlm_scores, "clusters"],
    "The 'CCT single' and 'CCT cc' mechanisms' proposals (DermoGPT section 1): the scorer's K prompt "
    "variants per evaluated image aggregated by variant 0 alone (single) and by confidence-consistency "
    "weights softmax(lam * margin - beta * deviation) (cc); slates by aggregated probability.",
    kinds=KINDS | {"numpy"},
)
def cct_arms(context, store: Lake, source: SourceResource, models: ModelsResource):
    scores = lake_query(
        store,
        "proposals/evaluated_vlm_scores",
        ["vlm_scores", "clusters"],
        {"split": source.evaluate_split, "all_variants": True},
    )
    variants, scorer_dir = variant_table_from_scores(scores), str(models.scorer_model(store))
    single, single_meta = cct_proposals(variants, "single", mechanism=CCT_SINGLE, model=scorer_dir)
    cc, cc_meta = cct_proposals(variants, "cc", models.cct_lam, models.cct_beta, mechanism=CCT_CC, model=scorer_dir)
    table = combine_proposals([single, cc])
    return write_table(
        store,
        "cct_arms",
        table,
        {"lam": str(cc_meta["lam"]), "beta": str(cc_meta["beta"])},
        single=single_meta,
        cc=cc_meta,
        model=_first(scores, "model"),
        revision=_first(scores, "revision"),
    )


@model_asset(
    PROPOSALS_SCHEMA,
    ["images", "clusters"],
    "The 'VLM LoRA fine-tuned' mechanism's proposals: a LoRA adapter on the scorer (peft; DeepSpeed "
    "ZeRO-2 on GPU) trained on train-split images towards each image's risk continuation, then the "
    "fine-tuned model scored on the evaluated split (slate by probability); with "
    "ModelsResource.morph_task towards the morphology task's <morph> / <final_diagnosis> completion instead "
    "(models/morph_task.py). Runs only when ModelsResource.finetune is set; otherwise an empty table.",
    kinds=KINDS | {"deepspeed"},
    missing=lambda models: None if models.finetune else FINETUNE_MISSING,
)
def finetune(context, store: Lake, source: SourceResource, models: ModelsResource):
    con = connect_with(store, ["images", "clusters"])
    base = models.scorer_model(store)
    adapter = sft_adapter_dir(store, base)
    if models.morph_task:  # the completion target of the morphology task, with the curves' recipe
        from models.morph_task import planted_rows
        from models.morph_training import sft_config

        train, validation = (
            planted_rows(sql.run(con, "proposals/grpo_examples", {"split": split})) for split in ("train", "val")
        )
        recipe = morph_recipe(models)
        validation = validation.slice(0, recipe.heldout_images)
        config = sft_config(base, adapter, recipe)
    else:
        train, validation = (sql.run(con, "proposals/finetune_examples", {"split": s}) for s in ("train", "val"))
        config = FinetuneConfig(
            model_dir=str(base),
            adapter_dir=str(adapter),
            device=models.device_or_none(),
            max_steps=models.finetune_max_steps or None,
        )
    run = finetune_proposer(train, validation, config)
    table, meta = adapter_proposals(con, store, source, models, base, adapter, FINETUNED)
    context.log.info(f"fine-tuned {run['steps']} steps on {run['device']}; scored {meta['images_scored']} images")
    runs = finetune_training_run(run).table(FINETUNED, meta["model"], meta["revision"])
    return write_table(
        store,
        "finetune",
        table,
        {"adapter_dir": run["adapter_dir"], **_run_entry(runs)},
        finetune=run,
        scoring=meta,
        model=meta["model"],
        revision=meta["revision"],
    )


def adapter_proposals(con, store, source: SourceResource, models: ModelsResource, base, adapter, mechanism: str):
    """(proposals, scoring metadata): the evaluated split scored by the scorer `base` with its LoRA
    `adapter` (resumable cache under <lake>/cache/scorer), as `mechanism`'s proposals in the contract.
    How every trained mechanism is scored (the fine-tune here, GRPO in assets/grpo.py), so `contrasts`
    compares them by one code path."""
    inputs = sql.run(con, "proposals/model_scorer_inputs", {"split": source.evaluate_split}).filter(
        pc.field("evaluated")
    )
    config = ScorerConfig(
        model_dir=str(base), adapter_dir=str(adapter), batch_size=models.batch_size, device=models.device_or_none()
    )
    scores, meta = score_images(
        public_inputs(inputs.drop_columns(["evaluated"])), config, store.root / "cache" / "scorer", progress=False
    )
    return as_contract(proposals_from_scores(scores, mechanism, model=f"{base}+{adapter}")), meta


def morph_recipe(models: ModelsResource):
    """The fine-tune's and GRPO's recipe on the morphology task (models/morph_training.py CurveConfig,
    the figures of docs/models.md), with the resource's device and step counts where they are set."""
    from models.morph_training import CurveConfig

    recipe = CurveConfig(device=models.device_or_none())
    return dataclasses.replace(
        recipe,
        sft_steps=models.finetune_max_steps or recipe.sft_steps,
        grpo_steps=models.grpo_max_steps or recipe.grpo_steps,
    )


def sft_adapter_dir(store, base) -> Path:
    """Where the fine-tune saves its LoRA adapter of `base` (GRPO starts from it: assets/grpo.py)."""
    return store.root / "models" / "adapters" / f"{base.name}-lora"


@table_asset(
    PROPOSALS,
    ["gate_proxy_selection", readout, probe, finetune, "grpo"],
    "trainer, mechanism, model, model_revision, data_sha256, config, seed, step_kind, step, metric, value, "
    "chosen, software_version: what each trainer chose from which data, one fact per row "
    "(models/training_runs.py): the readout's C search and lock, the probe's epochs and tau, the gate "
    "proxy's 48 candidates (read from gate_proxy_selection), the fine-tune's losses. Empty, with this "
    "schema, when nothing was trained (the reference study, model mechanisms off).",
)
def model_runs(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    runs = [training_runs.decode(store.read(name).schema.metadata) for name in TRAINED_TABLES if store.has_table(name)]
    # The reference study fits no gate proxy: a selection table left by an earlier cohort is not its run.
    if not source.is_reference and store.has_table("gate_proxy_selection"):
        gate = gate_proxy_training_run(store.read("gate_proxy_selection"))
        runs += [gate.table()] if gate else []
    table = training_runs.combine(runs)
    trainers = sorted(set(table.column("trainer").to_pylist()))
    return write_table(store, "model_runs", table, trainers=", ".join(trainers) or "none: nothing was trained")


def model_proposals(store) -> list[pa.Table]:
    """The model mechanisms' proposals tables in declaration order (empty ones when not run)."""
    return [store.read(name) for name in MODEL_PROPOSAL_TABLES]
