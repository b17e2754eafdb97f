"""GRPO on the MAVIC reward (DermoGPT section 6): the RL stage after the LoRA SFT. For each train-split
image the policy (a new LoRA adapter on the SFT model) samples a group of K completions of a
morphology-grounded instruction, MAVIC scores each one from the labels alone (models/mavic.py), and
the policy moves along the group-normalised advantage times its log-probability ratio, clipped, minus
KL to the reference policy (the SFT model itself: the adapter switched off).

The loop is TRL's GRPOTrainer (trl 1.16.0, checked here: it resolves beside torch 2.13.0, transformers
5.24.0, peft 0.21.2 and accelerate 1.15.0, and trains the tiny Gemma3 and LLaVA with images, offline,
on CPU), driven with `loss_type="grpo"` (the original per-sequence GRPO objective, not TRL's default
DAPO), `scale_rewards="group"` (advantage = (r - group mean) / (group std + 1e-4)) and one update per
generation (ratio 1 at the sample, the clip acting once the policy moves within a step's batch).
The policy's base is the SFT model merged into one directory (`merge_sft_adapter`): the reference
policy is that base with the GRPO adapter disabled (no second copy of the weights), and the scorer reads
the result as base directory + adapter directory like any other fine-tuned mechanism.

Every step's MAVIC components (means over the step's completions), the reward's spread, KL to the
reference, the loss and the learning rate are kept (`steps_table`: the lake's `grpo_steps`). Given
held-out items and `eval_every`, the policy is also scored on them before the first update (a step 0
row) and every `eval_every` steps: `eval_samples` seeded samples per item, MAVIC's means in the
`heldout_*` columns, so the log shows whether the reward moves on images the run never trained on.
No Dagster here."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autheval.columns import schema
from models.finetune import LANGUAGE_MODEL_TARGETS, lora_config, name_deepspeed_accelerator
from models.prompts import metadata_value
from models.training_runs import TrainingRun, facts
from warehouse.atomic import atomic_dir

PROMPT_ID = "dermogpt_morph_dx_v1"
# ISIC 2019's eight diagnoses (the S_hier ontology's leaves) and its images' modality
DIAGNOSIS_CODES = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC")
DERMOSCOPIC = "dermoscopic"
SCHEMA = "derm7pt"  # MAVIC's schema of dermoscopic images (autheval/data/mavic/schemas.yaml)
PROMPT_TEMPLATE = (
    "This is a research image-assessment task, not patient-specific clinical advice. Inspect the "
    "dermoscopy image and the listed public metadata only. First describe the lesion's dermoscopic "
    "attributes inside <morph></morph> as one JSON object of attribute to state, with these attributes "
    "and states: {attributes}. Then give one diagnosis out of MEL, NV, BCC, AK, BKL, DF, VASC, SCC inside "
    "<final_diagnosis></final_diagnosis>. Public metadata: age={age}, sex={sex}, anatomic_site={anatomic_site}."
)
REQUIRED_COLUMNS = ("image_id", "image_path", "reference_diagnosis", "reference_attributes", "modality")
MAVIC_COMPONENTS = ("r_fmt", "r_acc", "s_hier", "s_morph", "gate", "reward")

HELDOUT_COMPONENTS = ("reward", "r_fmt", "r_acc", "s_hier", "s_morph")  # held-out means in grpo_steps
STEPS_SCHEMA = schema(
    "step reward reward_std r_fmt r_acc s_hier s_morph gate kl loss lr completion_tokens frac_zero_std_groups",
    " ".join(f"heldout_{name}" for name in HELDOUT_COMPONENTS),
    "seed",
    "mechanism model model_revision config config_sha256 reward_form data_sha256 engine device dtype",
    "software_version",
)


class GrpoConfig(BaseModel):
    """The declared GRPO run (defaults: the DermoGPT paper's GRPO stage). A bad value is refused with
    one line naming the field (ValueError; the CLI turns it into exit 2)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: str  # the policy's base: the SFT model (merge_sft_adapter), a local directory
    adapter_dir: str  # where the GRPO adapter is saved
    group_size: int = Field(8, ge=2)  # K completions per image (a group of one has no advantage)
    kl_coef: float = Field(0.1, ge=0, allow_inf_nan=False)  # beta: KL to the reference (SFT) policy
    lr: float = Field(1e-6, gt=0, allow_inf_nan=False)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str = LANGUAGE_MODEL_TARGETS
    images_per_step: int = Field(1, ge=1)  # prompts per optimizer step, each sampled group_size times
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)  # stop early (the CPU test runs 3 steps)
    max_completion_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    clip_epsilon: float = Field(0.2, gt=0, lt=1)
    loss_type: Literal["grpo", "dr_grpo", "bnpo", "dapo"] = "grpo"
    max_grad_norm: float = Field(1.0, gt=0, allow_inf_nan=False)
    eval_every: int = Field(0, ge=0)  # score the held-out items every this many steps (0: never)
    eval_samples: int = Field(4, ge=1)  # completions per held-out item, sampled as in training, seeded
    seed: int = 20260710
    device: str | None = None  # None: CUDA (bf16) when present, else CPU (fp32)

    def __init__(self, **values):
        try:
            super().__init__(**values)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "config"
            value = f", got {first['input']!r}" if "input" in first and first["type"] != "missing" else ""
            raise ValueError(f"GrpoConfig.{field}: {first['msg']}{value}") from None

    def as_json(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True, default=str)

    def sha256(self) -> str:
        """SHA-256 of the config's JSON (sorted keys): the name of the run's recipe on every step row."""
        return hashlib.sha256(self.as_json().encode()).hexdigest()


def grpo_prompt(age, sex, anatomic_site) -> str:
    """The morphology-grounded instruction with the image's public metadata (formatted as the risk
    prompt formats it: 55.0 stays '55.0', missing is 'nan')."""
    return PROMPT_TEMPLATE.format(
        attributes=schema_text(),
        age=metadata_value(age),
        sex=metadata_value(sex),
        anatomic_site=metadata_value(anatomic_site),
    )


def schema_text(schema: str = SCHEMA) -> str:
    """The declared schema's attributes and states as the instruction lists them (from MAVIC's own
    schema file, so the prompt asks for exactly what R_fmt accepts)."""
    from models.mavic import default_schemas

    attributes = default_schemas().schemas[schema].attributes
    return "; ".join(f"{name} ({', '.join(states)})" for name, states in attributes.items())


def grpo_examples(table: pa.Table, source: str = "GRPO input") -> list[dict]:
    """The training items: public fields, the reference diagnosis, the reference attributes (a JSON
    object of attribute -> state, '{}' when the source plants none) and the modality. A missing column
    or a reference_attributes value that is not a JSON object is one line naming the column."""
    from autheval.errors import RecordError

    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise RecordError(source, missing[0], "required column is missing")
    rows = table.to_pylist()
    for row in rows:
        if not row["reference_diagnosis"]:
            raise RecordError(
                source, "reference_diagnosis", "every training image needs a reference diagnosis", row["image_id"]
            )
        try:
            attributes = json.loads(row["reference_attributes"] or "{}")
        except (TypeError, json.JSONDecodeError):
            attributes = None
        if not isinstance(attributes, dict):
            raise RecordError(
                source, "reference_attributes", "must be a JSON object of attribute -> state", row["image_id"]
            )
    return rows


def merge_sft_adapter(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """The SFT model as one directory: `base_dir` with the SFT LoRA adapter merged in (fp32, then saved
    with the base's processor). GRPO trains a new adapter on it and keeps it, adapter off, as the
    reference policy; the scorer reads `out_dir` + the GRPO adapter. Written to a temporary folder and
    renamed; a folder already merged from the same base and adapter bytes is reused."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from models.device import quiet_transformers
    from models.scorer import check_adapter_base, directory_sha256

    out = Path(out_dir)
    origin = {
        "base_model": str(base_dir),
        "base_sha256": directory_sha256(base_dir),
        "sft_adapter": str(adapter_dir),
        "sft_adapter_sha256": directory_sha256(adapter_dir),
    }
    manifest = out / "merged_from.json"
    if manifest.exists() and json.loads(manifest.read_text()) == origin:
        return out
    check_adapter_base(base_dir, adapter_dir)
    quiet_transformers()
    name_deepspeed_accelerator()
    from peft import PeftModel

    from models.model_dir import check_model_dir

    check_model_dir(base_dir, "base model", "scorer")  # links, FIFOs, impossible sizes: one line
    processor = AutoProcessor.from_pretrained(base_dir, backend="pil", local_files_only=True)
    base = AutoModelForImageTextToText.from_pretrained(base_dir, local_files_only=True)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    with atomic_dir(out) as staging:
        merged.save_pretrained(staging)
        processor.save_pretrained(staging)
        (staging / "merged_from.json").write_text(json.dumps(origin, indent=1) + "\n")
    return out


def combine_adapters(
    base_dir: str | Path, sft_adapter: str | Path, grpo_adapter: str | Path, out_dir: str | Path
) -> Path:
    """The GRPO-trained model as one LoRA adapter on the original base: the SFT adapter and the GRPO
    adapter (trained on the merged SFT model, same module names) concatenated (peft's `cat`: rank 64 + 16,
    delta W = delta W_sft + delta W_grpo exactly), so the mechanism is `base + adapter` like the
    fine-tune's, for the scorer and every reader of a mechanism's adapter_dir. Records the base's
    content hash (the scorer's base check). Written to a temporary folder and renamed."""
    from transformers import AutoModelForImageTextToText

    from autheval.errors import RecordError
    from models.device import quiet_transformers
    from models.scorer import check_adapter_base, directory_sha256

    check_adapter_base(base_dir, sft_adapter)
    grpo_meta = json.loads((Path(grpo_adapter) / "finetune_metadata.json").read_text())
    merged_from = Path(grpo_meta["base_model"]) / "merged_from.json"
    origin = json.loads(merged_from.read_text()) if merged_from.exists() else {}
    if (origin.get("base_sha256"), origin.get("sft_adapter_sha256")) != (
        directory_sha256(base_dir),
        directory_sha256(sft_adapter),
    ):
        raise RecordError(
            str(grpo_adapter),
            None,
            f"this GRPO adapter was not trained on this base merged with this SFT adapter ({sft_adapter})",
        )
    quiet_transformers()
    name_deepspeed_accelerator()
    from peft import PeftModel

    from models.model_dir import check_model_dir

    check_model_dir(base_dir, "base model", "scorer")  # links, FIFOs, impossible sizes: one line
    base = AutoModelForImageTextToText.from_pretrained(base_dir, local_files_only=True)
    model = PeftModel.from_pretrained(base, str(sft_adapter), adapter_name="sft")
    model.load_adapter(str(grpo_adapter), adapter_name="grpo")
    model.add_weighted_adapter(["sft", "grpo"], [1.0, 1.0], "default", combination_type="cat")
    for name in ("sft", "grpo"):
        model.delete_adapter(name)
    out = Path(out_dir)
    with atomic_dir(out) as staging:
        model.save_pretrained(staging)
        (staging / "finetune_metadata.json").write_text(
            json.dumps(
                {
                    "base_model": str(base_dir),
                    "base_sha256": directory_sha256(base_dir),
                    "trainer": "sft+grpo",
                    "sft_adapter": str(sft_adapter),
                    "sft_adapter_sha256": directory_sha256(sft_adapter),
                    "grpo_adapter": str(grpo_adapter),
                    "grpo_adapter_sha256": directory_sha256(grpo_adapter),
                    "grpo": grpo_meta,
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    return out


def _completion_text(completion) -> str:
    """TRL gives a conversational completion as [{'role': 'assistant', 'content': text}]."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    return str(completion)


class MavicReward:
    """MAVIC as a TRL reward function: the scalar reward per completion, and the components' means of
    each call (one call per optimizer step) kept in `steps` and passed to the trainer's metric log.
    Groups are the image's K completions (TRL repeats an image K times in a row, one process).
    `sign` -1 hands the trainer the negated reward (the wiring's ablation: the logged MAVIC reward must
    then fall); the logged components are MAVIC's own either way."""

    __name__ = "mavic"

    def __init__(self, weights=None, config=None, ontology=None, sign: float = 1.0):
        if sign not in (1.0, -1.0):
            raise ValueError(f"MavicReward.sign must be 1 or -1, got {sign!r}")
        self.weights, self.config, self.ontology, self.sign = weights, config, ontology, float(sign)
        self.steps: list[dict] = []

    def score(self, texts: list[str], rows: list[dict]) -> dict:
        """MAVIC of `texts`, each with its row's labels (image_id is the group)."""
        from models.mavic import score_completions

        return score_completions(
            texts,
            np.asarray([r["modality"] for r in rows], dtype=object),
            np.asarray([r["reference_diagnosis"] for r in rows], dtype=object),
            [json.loads(r["reference_attributes"] or "{}") for r in rows],
            np.array([str(r["image_id"]) for r in rows], dtype=object),
            weights=self.weights,
            config=self.config,
            ontology=self.ontology,
        )

    def __call__(
        self, prompts, completions, image_id, modality, reference_diagnosis, reference_attributes, log_metric=None, **_
    ):
        texts = [_completion_text(c) for c in completions]
        labels = zip(image_id, modality, reference_diagnosis, reference_attributes)
        rows = [
            {"image_id": i, "modality": m, "reference_diagnosis": d, "reference_attributes": a} for i, m, d, a in labels
        ]
        scored = self.score(texts, rows)
        means = {name: float(np.mean(np.asarray(scored[name], dtype=np.float64))) for name in MAVIC_COMPONENTS}
        self.steps.append(means)
        if log_metric is not None:
            for name, value in means.items():
                log_metric(f"mavic/{name}", value)
        return [self.sign * float(r) for r in np.asarray(scored["reward"], dtype=np.float64)]


def _dataset(rows: list[dict]):
    """The items as a datasets.Dataset in TRL's conversational VLM form; images are opened when a batch
    is read (open_rgb: 8-bit RGB), so a large train split is never held decoded in memory."""
    from datasets import Dataset

    from models.scorer_batches import open_rgb

    message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ""}]}]
    table = Dataset.from_list(
        [
            {
                "prompt_text": grpo_prompt(r.get("age"), r.get("sex"), r.get("anatomic_site")),
                "image_path": r["image_path"],
                "image_id": r["image_id"],
                "modality": r["modality"],
                "reference_diagnosis": r["reference_diagnosis"],
                "reference_attributes": r["reference_attributes"] or "{}",
            }
            for r in rows
        ]
    )

    def with_images(batch: dict) -> dict:
        prompts = []
        for text in batch["prompt_text"]:
            turn = json.loads(json.dumps(message))
            turn[0]["content"][1]["text"] = text
            prompts.append(turn)
        return {**batch, "prompt": prompts, "image": [open_rgb(p) for p in batch["image_path"]]}

    return table.with_transform(with_images)


def sample_completions(
    model,
    processor,
    rows: list[dict],
    *,
    samples: int = 1,
    greedy: bool = False,
    max_new_tokens: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    batch_rows: int = 16,
) -> list[str]:
    """Completions of the morphology instruction for each row (its image and public metadata), `samples`
    per row, row by row, decoded as TRL decodes them: greedy, or sampled as GRPO samples (top-k and
    top-p off, the image token suppressed) from a random stream forked and seeded with `seed`, so the
    caller's stream (a training run's) is left as it was."""
    import torch

    from models.scorer_batches import encode_prompts, open_rgb

    tokenizer = processor.tokenizer
    device = next(model.parameters()).device
    settings = {
        "max_new_tokens": max_new_tokens,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "suppress_tokens": [model.config.image_token_id],
    }
    if greedy:
        settings.update(do_sample=False, num_return_sequences=1)
    else:
        settings.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, num_return_sequences=samples)
    training = model.training
    model.eval()
    texts: list[str] = []
    side = tokenizer.padding_side
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            torch.manual_seed(seed)
            for begin in range(0, len(rows), batch_rows):
                chunk = rows[begin : begin + batch_rows]
                encoded = encode_prompts(
                    processor,
                    [open_rgb(r["image_path"]) for r in chunk],
                    [grpo_prompt(r.get("age"), r.get("sex"), r.get("anatomic_site")) for r in chunk],
                    padding_side="left",
                )
                dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
                inputs = {k: v.to(device, dtype) if k == "pixel_values" else v.to(device) for k, v in encoded.items()}
                out = model.generate(**inputs, **settings)
                texts += processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(training)
    return texts


def heldout_scores(model, processor, rows: list[dict], reward: MavicReward, config: GrpoConfig) -> dict:
    """MAVIC's means (HELDOUT_COMPONENTS) over `config.eval_samples` completions of each held-out row,
    sampled at the run's temperature and seed (the same stream at every evaluation, so the curve moves
    with the policy, not with the draw)."""
    texts = sample_completions(
        model,
        processor,
        rows,
        samples=config.eval_samples,
        max_new_tokens=config.max_completion_tokens,
        temperature=config.temperature,
        seed=config.seed,
    )
    scored = reward.score(texts, [r for r in rows for _ in range(config.eval_samples)])
    return {name: float(np.mean(scored[name])) for name in HELDOUT_COMPONENTS}


def _heldout_callback(processor, rows: list[dict], reward: MavicReward, config: GrpoConfig):
    """A trainer callback that scores the held-out rows before the first update and every
    `config.eval_every` steps (and at the last); `.log` maps step -> heldout_scores."""
    from transformers import TrainerCallback

    class HeldOutEvaluation(TrainerCallback):
        log: dict[int, dict] = {}

        def on_train_begin(self, args, state, control, model=None, **_):
            self.log[0] = heldout_scores(model, processor, rows, reward, config)

        def on_step_end(self, args, state, control, model=None, **_):
            step = state.global_step
            if step % config.eval_every == 0 or step == state.max_steps:
                self.log[step] = heldout_scores(model, processor, rows, reward, config)

    callback = HeldOutEvaluation()
    callback.log = {}
    return callback


def _quiet_trainer(trainer) -> None:
    """Results alone on stdout: transformers' printer and progress callbacks write each log line there."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)


def grpo_train(
    train: pa.Table,
    config: GrpoConfig,
    *,
    weights=None,
    mavic_config=None,
    ontology=None,
    reward=None,
    held_out: pa.Table | None = None,
) -> dict:
    """Train a GRPO LoRA adapter on `train` (grpo_examples' columns) with the MAVIC reward (its PMI
    `weights`, `mavic_config` and `ontology`; None: MAVIC's defaults), save it to `config.adapter_dir`
    (with the base's content hash, which the scorer checks), return the run: every step's reward
    components, KL, loss and learning rate, and what the run read. `reward`: another TRL reward
    function in MAVIC's place (its components are then not logged). `held_out` (grpo_examples'
    columns) with `config.eval_every` > 0: MAVIC on those items at step 0 and every eval_every steps."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, set_seed

    from autheval.io import table_sha256
    from models.device import choose_device, dtype_for, dtype_name, quiet_transformers
    from models.scorer import directory_sha256

    started = time.perf_counter()
    rows = grpo_examples(train)
    if not rows:
        raise ValueError("GRPO has no training images: no adapter is saved")
    heldout_rows = grpo_examples(held_out, "GRPO held-out items") if held_out is not None else []
    if config.eval_every and not heldout_rows:
        raise ValueError("GrpoConfig.eval_every needs held-out items (held_out=)")
    device = choose_device(config.device)
    name_deepspeed_accelerator(device.type)  # before TRL / accelerate import deepspeed
    quiet_transformers()
    from trl import GRPOConfig as TrlConfig
    from trl import GRPOTrainer

    dtype = dtype_for(device)
    set_seed(config.seed)  # the adapter's initial weights and the first samples
    from models.model_dir import check_model_dir

    check_model_dir(config.model_dir, "model_dir", "scorer")  # links, FIFOs, impossible sizes: one line
    processor = AutoProcessor.from_pretrained(config.model_dir, backend="pil", local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(config.model_dir, dtype=dtype, local_files_only=True)
    reward = reward if reward is not None else MavicReward(weights, mavic_config, ontology)
    components = getattr(reward, "steps", [])
    lora = lora_config(config)
    scratch = Path(tempfile.mkdtemp(prefix="grpo-"))
    try:
        args = TrlConfig(
            output_dir=str(scratch),
            num_generations=config.group_size,
            per_device_train_batch_size=config.group_size * config.images_per_step,
            gradient_accumulation_steps=1,
            num_train_epochs=config.epochs,
            max_steps=config.max_steps or -1,
            learning_rate=config.lr,
            lr_scheduler_type=config.lr_scheduler,
            warmup_steps=0,
            weight_decay=0.0,
            beta=config.kl_coef,
            epsilon=config.clip_epsilon,
            loss_type=config.loss_type,
            scale_rewards="group",
            temperature=config.temperature,
            max_completion_length=config.max_completion_tokens,
            max_grad_norm=config.max_grad_norm,
            seed=config.seed,
            data_seed=config.seed,
            use_cpu=device.type == "cpu",
            bf16=device.type == "cuda",
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=_dataset(rows),
            processing_class=processor,
            peft_config=lora,
        )
        _quiet_trainer(trainer)
        evaluation = None
        if config.eval_every:
            scorer = reward if isinstance(reward, MavicReward) else MavicReward(weights, mavic_config, ontology)
            evaluation = _heldout_callback(processor, heldout_rows, scorer, config)
            trainer.add_callback(evaluation)
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        train_started = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - train_started
        logs = [entry for entry in trainer.state.log_history if "step" in entry and "loss" in entry]
        run_device = next(trainer.model.parameters()).device
        adapter_dir = Path(config.adapter_dir)
        trainer.model.save_pretrained(adapter_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not logs:
        raise ValueError("GRPO ran no training step: no adapter is saved")
    steps = [_step_record(entry, components[i] if i < len(components) else {}) for i, entry in enumerate(logs)]
    if evaluation is not None:  # a step 0 row (the policy before any update), then each evaluated step's
        steps.insert(0, {**dict.fromkeys(steps[0]), "step": 0})
        for step in steps:
            scores = evaluation.log.get(step["step"], {})
            step.update({f"heldout_{name}": scores.get(name) for name in HELDOUT_COMPONENTS})
    (adapter_dir / "finetune_metadata.json").write_text(
        json.dumps(  # the scorer's base check reads this
            {
                "base_model": str(config.model_dir),
                "base_sha256": directory_sha256(config.model_dir),
                "trainer": "grpo",
                "config": config.model_dump(),
                "reward_form": _reward_form(reward, mavic_config),
                "steps": len(logs),
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    data = pa.Table.from_pylist(
        [{k: r.get(k) for k in (*REQUIRED_COLUMNS, "age", "sex", "anatomic_site")} for r in rows]
    )
    return {
        "adapter_dir": str(adapter_dir),
        "base_model": str(config.model_dir),
        "engine": "trl GRPOTrainer + peft",
        "device": str(run_device),
        "dtype": dtype_name(dtype),
        "steps": len(logs),
        "train_images": len(rows),
        "completions": len(logs) * config.group_size * config.images_per_step,
        "step_log": steps,
        "trainable_parameters": trainable,
        "prompt_id": PROMPT_ID,
        "reward_form": _reward_form(reward, mavic_config),
        "seconds_training": round(train_s, 3),
        "seconds": round(time.perf_counter() - started, 3),
        "data_sha256": table_sha256(data),
        "config": config.as_json(),
        "config_sha256": config.sha256(),
        "seed": config.seed,
        "torch_threads": torch.get_num_threads(),
    }


def _reward_form(reward, mavic_config) -> str:
    """The composite the run optimised (MAVIC's declared formula), or the reward function's name."""
    if isinstance(reward, MavicReward):
        from models.mavic import MavicConfig

        config = mavic_config or MavicConfig()
        negated = "negated " if reward.sign < 0 else ""
        return f"{negated}mavic {config.composite}: {config.formula()} (config sha256 {config.sha256()[:16]})"
    return f"custom: {getattr(reward, '__name__', type(reward).__name__)}"


def _step_record(entry: dict, mavic: dict) -> dict:
    """One step of TRL's log with the MAVIC components' means of the same step."""

    def number(key):
        value = entry.get(key)
        return None if value is None else float(value)

    return {
        "step": int(entry["step"]),
        "reward": mavic.get("reward", number("reward")),
        "reward_std": number("reward_std"),
        **{k: mavic.get(k) for k in MAVIC_COMPONENTS if k != "reward"},
        "kl": number("kl"),
        "loss": number("loss"),
        "lr": number("learning_rate"),
        "completion_tokens": number("completions/mean_length"),
        "frac_zero_std_groups": number("frac_reward_zero_std"),
    }


def steps_table(run: dict, mechanism: str, model: str | None, model_revision: str | None) -> pa.Table:
    """The lake's `grpo_steps`: one row per optimizer step, named by the run that made it."""
    from autheval import __version__

    named = {
        "seed": int(run["seed"]),
        "mechanism": mechanism,
        "model": model,
        "model_revision": model_revision,
        "config": run["config"],
        "config_sha256": run["config_sha256"],
        "reward_form": run["reward_form"],
        "data_sha256": run["data_sha256"],
        "engine": run["engine"],
        "device": run["device"],
        "dtype": run["dtype"],
        "software_version": f"autheval {__version__}",
    }
    return pa.Table.from_pylist([{**step, **named} for step in run["step_log"]], schema=STEPS_SCHEMA)


def grpo_training_run(run: dict) -> TrainingRun:
    """`model_runs` facts of the run: each step's reward components, KL and loss (step_kind `step`);
    chosen marks the last step, the adapter that was saved."""
    records = [
        {k: v for k, v in step.items() if v is not None and (not isinstance(v, float) or math.isfinite(v))}
        for step in run["step_log"]
    ]
    return TrainingRun(
        "grpo",
        run["data_sha256"],
        run["config"],
        run["seed"],
        facts("step", records, step_key="step", chosen=records[-1]["step"] if records else None),
    )
