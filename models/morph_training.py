"""The SFT -> GRPO run on the tiny morphology task (models/morph_task.py), the evidence that the two
trainers learn (issue 32): a seeded tiny VLM (models/tiny.py, a -morph kind) is fine-tuned by the
project's fine-tune (models/finetune.py, `target="completion"`) until it writes DermoGPT's format,
then trained by GRPO (models/grpo.py) on the MAVIC reward from that SFT model, with MAVIC on held-out
images logged over the steps. benchmarks/training_curves.py runs it for several seeds; the tests run it
once, small.

Only torch, transformers, peft, trl (with datasets), numpy, pyarrow, PIL, pydantic and PyYAML are
imported on this path (no DuckDB, no Dagster), so a task folder prepared elsewhere trains on a bare
GPU machine."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from models.finetune import FinetuneConfig, finetune_proposer
from models.grpo import GrpoConfig, MavicReward, grpo_train, merge_sft_adapter, sample_completions
from models.tiny import ensure_tiny_model

KIND = "tiny-gemma3-morph"


@dataclass(frozen=True)
class CurveConfig:
    """One seeded SFT -> GRPO run. The defaults are the CPU run of benchmarks/training_curves.py; the
    learning rates are a tiny model's (the paper's 1e-4 SFT and 1e-6 GRPO are for 4B weights)."""

    seed: int = 0
    hidden: int | None = None  # text tower width (None: the tiny 32)
    layers: int | None = None  # text tower depth (None: the tiny 2)
    device: str | None = "cpu"
    sft_steps: int = 120
    sft_batch: int = 8
    sft_lr: float = 3e-3
    grpo_steps: int = 48
    group_size: int = 8
    images_per_step: int = 2
    grpo_lr: float = 3e-4
    kl_coef: float = 0.04
    temperature: float = 1.0
    max_completion_tokens: int = 48
    eval_every: int = 4
    eval_samples: int = 4
    heldout_images: int = 32  # the first this many held-out images are scored
    reward_sign: float = 1.0  # -1: GRPO on the negated reward (the ablation)

    def dims(self) -> dict | None:
        from models.tiny import text_dims

        if self.hidden is None and self.layers is None:
            return None
        return text_dims(self.hidden or 32, self.layers or 2)


def sft_config(base: str | Path, adapter_dir: str | Path, config: CurveConfig) -> FinetuneConfig:
    """The fine-tune's recipe on the morphology task (completion target, the plain torch loop), for the
    curves here and for the lake's fine-tune asset alike (assets/model_proposals.py)."""
    return FinetuneConfig(
        model_dir=str(base),
        adapter_dir=str(adapter_dir),
        target="completion",
        epochs=10**6,  # max_steps decides
        max_steps=config.sft_steps,
        batch_size=config.sft_batch,
        lr=config.sft_lr,
        weight_decay=0.0,
        seed=config.seed,
        device=config.device,
        use_deepspeed=False,  # one process on any device: the plain torch + peft loop
    )


def grpo_config(merged: str | Path, adapter_dir: str | Path, config: CurveConfig) -> GrpoConfig:
    """GRPO's recipe from the merged SFT model on the morphology task, for the curves here and for the
    lake's GRPO asset alike (assets/grpo.py)."""
    return GrpoConfig(
        model_dir=str(merged),
        adapter_dir=str(adapter_dir),
        group_size=config.group_size,
        images_per_step=config.images_per_step,
        max_steps=config.grpo_steps,
        lr=config.grpo_lr,
        kl_coef=config.kl_coef,
        temperature=config.temperature,
        max_completion_tokens=config.max_completion_tokens,
        eval_every=config.eval_every,
        eval_samples=config.eval_samples,
        seed=config.seed,
        device=config.device,
    )


def _load(model_dir: str | Path, device: str | None, adapter_dir: str | Path | None = None):
    """(model, processor) of a model folder (and adapter) on the device, in its dtype."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from models.device import choose_device, dtype_for

    run_device = choose_device(device)
    processor = AutoProcessor.from_pretrained(model_dir, backend="pil", local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype_for(run_device), local_files_only=True)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    return model.to(run_device).eval(), processor


def greedy_scores(model, processor, rows: list[dict], max_new_tokens: int) -> dict:
    """Greedy completions of `rows` and MAVIC's means over them: the format-validity rate (r_fmt),
    accuracy and the reward, with the completions themselves."""
    texts = sample_completions(model, processor, rows, greedy=True, max_new_tokens=max_new_tokens)
    scored = MavicReward().score(texts, rows)
    means = {name: float(np.mean(scored[name])) for name in ("r_fmt", "r_acc", "s_morph", "reward")}
    return {**means, "completions": texts}


def sft_stage(train: pa.Table, held_out: pa.Table, work: Path, config: CurveConfig) -> dict:
    """The seeded tiny model, its SFT adapter (completion target) and the merged SFT model, with the
    greedy format-validity rate on the held-out images."""
    from models.device import quiet_transformers

    quiet_transformers()
    base = ensure_tiny_model(KIND, work / f"base-{config.seed}", seed=config.seed, dims=config.dims())
    adapter = work / f"sft-{config.seed}"
    run = finetune_proposer(train, held_out.slice(0, config.heldout_images), sft_config(base, adapter, config))
    merged = merge_sft_adapter(base, adapter, work / f"merged-{config.seed}")
    model, processor = _load(merged, config.device)
    scores = greedy_scores(model, processor, held_out.slice(0, config.heldout_images).to_pylist(), 64)
    return {"base": base, "adapter": adapter, "merged": merged, "run": run, "heldout_greedy": scores}


def grpo_stage(train: pa.Table, held_out: pa.Table, merged: Path, work: Path, config: CurveConfig) -> dict:
    """GRPO from the merged SFT model on MAVIC (or its negation), held-out MAVIC every eval_every steps."""
    name = "grpo" if config.reward_sign > 0 else "grpo-negated"
    grpo = grpo_config(merged, work / f"{name}-{config.seed}", config)
    return grpo_train(
        train, grpo, reward=MavicReward(sign=config.reward_sign), held_out=held_out.slice(0, config.heldout_images)
    )


def training_curve(train: pa.Table, held_out: pa.Table, work: str | Path, config: CurveConfig) -> dict:
    """SFT then GRPO for one seed: the SFT run and its held-out greedy scores, the GRPO run (its
    step_log holds the held-out curve), and the seconds each took."""
    work = Path(work)
    started = time.perf_counter()
    sft = sft_stage(train, held_out, work, config)
    sft_s = time.perf_counter() - started
    grpo = grpo_stage(train, held_out, sft["merged"], work, config)
    return {
        "config": asdict(config),
        "sft": sft,
        "grpo": grpo,
        "seconds_sft": round(sft_s, 1),
        "seconds_grpo": round(time.perf_counter() - started - sft_s, 1),
    }
