"""LoRA fine-tuning of a VLM proposer (DermoGPT section 5): the model learns to continue the AuthEval
risk prompt (spec 5.1) of a train-split image with the continuation of its reference risk level, the
same mean token log-likelihood the scorer reads. The adapter is saved as a local directory; the scorer
takes base directory + adapter directory and scores the fine-tuned model as its own mechanism.

Two targets (`FinetuneConfig.target`): `risk_level` (the above) and `completion`, where each row brings
its own `prompt` and target `completion` text (ended by the tokenizer's end-of-sequence token, so a
sampler stops there): the SFT stage before GRPO, which teaches DermoGPT's `<morph>` /
`<final_diagnosis>` completion format (models/morph_task.py builds such rows).

Two engines, the same loop:
* DeepSpeed ZeRO-2 (bf16 on GPU): the path to several GPUs (`deepspeed --num_gpus N`). DeepSpeed's own
  AdamW in its `torch_adam` form (nothing is compiled on the GPU machine) and our warmup-cosine.
* plain torch + peft (the default on CPU): on CPU DeepSpeed first JIT-builds its shared-memory comm op
  (a slow build, figures: docs/models.md, "Models: the VLM likelihood scorer, tiny models, LoRA
  fine-tuning"; cached afterwards in ~/.cache/torch_extensions); a two-step CPU run should not pay that.
  DeepSpeed on CPU works (CPU accelerator, gloo backend, one process): ZeRO-2 and ZeRO-3 trained
  the tiny Gemma3 here, ZeRO-1 a small torch model; `use_deepspeed=True` forces it. ZeRO-3 is refused
  with several processes (the adapter would be partitioned across ranks when saved).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from autheval.vocabulary import RISK_LEVELS
from models.prompts import CONTINUATIONS, PUBLIC_COLUMNS, risk_prompt
from models.training_runs import TrainingRun, facts

TARGET_COLUMN = "ideal_action_level"  # 0..3 = very_low..high (the lake's images table)
TARGETS = ("risk_level", "completion")  # what the model learns to write (FinetuneConfig.target)
COMPLETION_COLUMNS = ("prompt", "completion")  # a `completion` row's own instruction and target text
# LoRA on the language model's attention and MLP projections; embeddings, lm_head and the vision tower
# stay frozen (DermoGPT excludes lm_head and embed_tokens too).
LANGUAGE_MODEL_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass(frozen=True)
class FinetuneConfig:
    model_dir: str
    adapter_dir: str  # where the adapter is saved (a local directory)
    epochs: int = 1
    max_steps: int | None = None  # stop early (the CPU test runs 2 steps)
    batch_size: int = 4  # per device
    lr: float = 1e-4
    weight_decay: float = 0.1
    warmup_ratio: float = 0.03
    lora_r: int = 64
    lora_alpha: int = 64
    lora_dropout: float = 0.05
    target_modules: str = LANGUAGE_MODEL_TARGETS
    seed: int = 20260710
    use_deepspeed: bool | None = None  # None: DeepSpeed on CUDA, plain loop on CPU
    zero_stage: int = 2
    device: str | None = None
    target: str = "risk_level"  # or "completion": each row's `prompt` and `completion` text (TARGETS)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"FinetuneConfig.target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        # epochs=0 (or max_steps=0) would save the untrained adapter, scored afterwards as a fine-tuned model
        for name in ("epochs", "batch_size", "max_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"FinetuneConfig.{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"FinetuneConfig.lr must be a positive finite number, got {self.lr!r}")


def level_targets(processor, levels: list[int]) -> list[list[int]]:
    """The token ids of each risk level's continuation (the `risk_level` target)."""
    tokenizer = processor.tokenizer
    return [tokenizer(CONTINUATIONS[RISK_LEVELS[level]], add_special_tokens=False)["input_ids"] for level in levels]


def completion_targets(processor, completions: list[str]) -> list[list[int]]:
    """The token ids of each completion text and the end-of-sequence token (the `completion` target):
    the model learns where to stop, so a sampler's completion is the format and nothing after it."""
    tokenizer = processor.tokenizer
    return [tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for text in completions]


def training_batch(processor, images: list, prompts: list[str], targets: list[list[int]], device, dtype) -> dict:
    """Prompt + target token ids per row, right-padded; labels are -100 except on the target."""
    import torch

    from models.scorer_batches import encode_prompts, pad_token_id

    encoded = encode_prompts(processor, images, prompts)
    prompt_len = encoded["attention_mask"].sum(dim=1).tolist()
    width = max(p + len(t) for p, t in zip(prompt_len, targets))
    rows = torch.full((len(images), width), pad_token_id(processor), dtype=torch.long)
    mask = torch.zeros_like(rows)
    labels = torch.full_like(rows, -100)
    types = torch.zeros_like(rows) if "token_type_ids" in encoded else None
    for r, (length, target) in enumerate(zip(prompt_len, targets)):
        rows[r, :length] = encoded["input_ids"][r, :length]
        rows[r, length : length + len(target)] = torch.tensor(target)
        mask[r, : length + len(target)] = 1
        labels[r, length : length + len(target)] = torch.tensor(target)  # the model shifts labels itself
        if types is not None:
            types[r, :length] = encoded["token_type_ids"][r, :length]
    batch = {"input_ids": rows, "attention_mask": mask, "labels": labels}
    if types is not None:
        batch["token_type_ids"] = types
    batch = {k: v.to(device) for k, v in batch.items()}
    if "pixel_values" in encoded:
        batch["pixel_values"] = encoded["pixel_values"].to(device, dtype)
    return batch


def _examples(table: pa.Table, target: str = "risk_level") -> list[dict]:
    from autheval.errors import RecordError

    wanted = (TARGET_COLUMN,) if target == "risk_level" else COMPLETION_COLUMNS
    missing = [c for c in ("image_id", "image_path", *wanted) if c not in table.column_names]
    if missing:
        raise RecordError("fine-tune input", missing[0], "required column is missing")
    if target == "risk_level":
        from models.level_metrics import check_levels

        check_levels(table.column(TARGET_COLUMN).to_pylist(), "fine-tune input", TARGET_COLUMN)
    else:
        for column in COMPLETION_COLUMNS:
            for row, value in enumerate(table.column(column).to_pylist()):
                if not isinstance(value, str) or not value.strip():
                    raise RecordError("fine-tune input", column, "must be non-empty text", f"row {row + 1}")
    keep = [c for c in (*PUBLIC_COLUMNS, *wanted) if c in table.column_names]
    return table.select(keep).to_pylist()


def _batches(examples: list[dict], size: int):
    for begin in range(0, len(examples), size):
        yield examples[begin : begin + size]


def _load(processor, examples: list[dict], device, dtype) -> dict:
    from models.scorer_batches import open_rgb

    images = [open_rgb(e["image_path"]) for e in examples]
    if TARGET_COLUMN in examples[0]:
        prompts = [risk_prompt(e.get("age"), e.get("sex"), e.get("anatomic_site")) for e in examples]
        targets = level_targets(processor, [int(e[TARGET_COLUMN]) for e in examples])
    else:
        prompts = [e["prompt"] for e in examples]
        targets = completion_targets(processor, [e["completion"] for e in examples])
    return training_batch(processor, images, prompts, targets, device, dtype)


def lora_config(config):
    """peft's LoraConfig from a trainer's config (its lora_r, lora_alpha, lora_dropout, target_modules; no
    bias terms): one place for the fine-tune's and GRPO's adapters (models/grpo.py), so they are built
    the same way."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        bias="none",
    )


def lora_model(model, config: FinetuneConfig):
    """`model` with a fresh LoRA adapter from `config` (lora_config), the only weights the fine-tune trains."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(config))  # adapter weights are kept in fp32 under a bf16 base


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def name_deepspeed_accelerator(device_type: str | None = None) -> None:
    """Set DS_ACCELERATOR (unless set) before anything imports deepspeed: accelerate imports it inside
    every save_pretrained, and deepspeed, left to guess on a machine without a GPU, logs a warning to
    stdout, where a command's results go. `device_type` None: CUDA when present (deepspeed's own guess)."""
    if device_type is None:
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if device_type == "cpu" else "cuda")


def deepspeed_logs_to_stderr() -> None:
    """DeepSpeed's logger writes to stdout; move it to stderr, the progress stream (after its import)."""
    for handler in logging.getLogger("DeepSpeed").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def _deepspeed_engine(model, config: FinetuneConfig, device, total_steps: int):
    """deepspeed.initialize for one process (or under the deepspeed launcher, which sets RANK etc.)."""
    name_deepspeed_accelerator(device.type)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    import deepspeed

    deepspeed_logs_to_stderr()
    deepspeed.init_distributed(dist_backend="gloo" if device.type == "cpu" else "nccl")
    ds_config = {
        "train_micro_batch_size_per_gpu": config.batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": config.zero_stage},
        "bf16": {"enabled": device.type == "cuda"},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": config.lr, "weight_decay": config.weight_decay, "torch_adam": True},
        },
        "gradient_clipping": 1.0,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        model_parameters=trainable,
        config=ds_config,
        lr_scheduler=lambda optimizer: warmup_cosine(optimizer, config.warmup_ratio, total_steps),
    )
    return engine


def warmup_cosine(optimizer, warmup_ratio: float, total_steps: int):
    """Linear warmup then cosine decay; the first step already has a non-zero rate (DeepSpeed's own
    WarmupCosineLR gives its first two steps a rate of 0, so a two-step run would learn nothing)."""
    import torch

    warmup = int(warmup_ratio * total_steps)

    def ratio(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total_steps - warmup, 1)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, ratio)


class _PlainEngine:
    """The DeepSpeed engine's three calls (forward, backward, step) with torch AdamW and warmup-cosine."""

    def __init__(self, model, config: FinetuneConfig, total_steps: int):
        import torch

        self.module = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay)
        self.scheduler = warmup_cosine(self.optimizer, config.warmup_ratio, total_steps)

    def __call__(self, **batch):
        return self.module(**batch)

    def backward(self, loss):
        loss.backward()

    def step(self):
        import torch

        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def finetune_proposer(train: pa.Table, validation: pa.Table, config: FinetuneConfig) -> dict:
    """Train a LoRA adapter on `train` (public columns + ideal_action_level, or + prompt and completion
    for `target="completion"`), report the validation loss after every epoch, save the adapter to
    `config.adapter_dir`; return the run's metadata."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from autheval.io import table_sha256
    from models.device import choose_device, dtype_for, dtype_name
    from models.scorer import directory_sha256

    started = time.perf_counter()
    train_rows, val_rows = _examples(train, config.target), _examples(validation, config.target)
    if not train_rows:
        raise ValueError("the fine-tune has no training images: no adapter is saved")
    device = choose_device(config.device)
    name_deepspeed_accelerator(device.type)  # before from_pretrained / save_pretrained import deepspeed
    if device.type == "cuda" and device.index is None and "LOCAL_RANK" in os.environ:  # deepspeed launcher
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dtype = dtype_for(device)
    use_deepspeed = device.type == "cuda" if config.use_deepspeed is None else config.use_deepspeed
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if use_deepspeed and config.zero_stage == 3 and world > 1:
        raise ValueError(
            "ZeRO-3 partitions the adapter across ranks and saving it would need a gather: "
            "use zero_stage 2 (the DermoGPT setting) with several processes"
        )

    from models.model_dir import check_model_dir

    check_model_dir(config.model_dir, "model_dir", "scorer")  # links, FIFOs, impossible sizes: one line
    processor = AutoProcessor.from_pretrained(config.model_dir, backend="pil", local_files_only=True)
    base = AutoModelForImageTextToText.from_pretrained(config.model_dir, dtype=dtype, local_files_only=True)
    torch.manual_seed(config.seed)  # the adapter's initial weights
    model = lora_model(base, config).to(device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    steps_per_epoch = math.ceil(len(train_rows[rank::world]) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    engine = (
        _deepspeed_engine(model, config, device, total_steps)
        if use_deepspeed
        else _PlainEngine(model, config, total_steps)
    )
    run_device = next(engine.module.parameters()).device
    run_dtype = next(p for p in engine.module.parameters() if not p.requires_grad).dtype

    rng = np.random.default_rng(config.seed)
    train_loss, val_loss, step, seen = [], [], 0, 0
    train_started = time.perf_counter()
    for _epoch in range(config.epochs):
        engine.module.train()
        order = rng.permutation(len(train_rows))
        shard = [train_rows[i] for i in order][rank::world]
        for batch_rows in _batches(shard, config.batch_size):
            if config.max_steps is not None and step >= config.max_steps:
                break
            loss = engine(**_load(processor, batch_rows, run_device, run_dtype)).loss
            engine.backward(loss)
            engine.step()
            train_loss.append(float(loss.detach().float()))
            step += 1
            seen += len(batch_rows)
        val_loss.append(validation_loss(engine.module, processor, val_rows, config.batch_size, run_device, run_dtype))
        if config.max_steps is not None and step >= config.max_steps:
            break
    train_s = time.perf_counter() - train_started
    if step == 0:
        raise ValueError("the fine-tune ran no training step: no adapter is saved")

    adapter_dir = Path(config.adapter_dir)
    if rank == 0:
        engine.module.save_pretrained(adapter_dir)
        # the base's content hash: the scorer refuses this adapter on any other base (check_adapter_base)
        (adapter_dir / "finetune_metadata.json").write_text(
            json.dumps(
                {
                    "base_model": str(config.model_dir),
                    "base_sha256": directory_sha256(config.model_dir),
                    "config": asdict(config),
                    "val_loss_per_epoch": val_loss,
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    return {
        "adapter_dir": str(adapter_dir),
        "base_model": str(config.model_dir),
        "engine": f"deepspeed zero-{config.zero_stage}" if use_deepspeed else "torch+peft",
        "device": str(run_device),
        "dtype": dtype_name(run_dtype),
        "world_size": world,
        "steps": step,
        "train_images": len(train_rows),
        "validation_images": len(val_rows),
        "train_loss_per_step": train_loss,
        "val_loss_per_epoch": val_loss,
        "trainable_parameters": trainable,
        "images_per_s": round(seen / train_s, 3) if train_s > 0 else None,
        "seconds": round(time.perf_counter() - started, 3),
        "data_sha256": table_sha256(pa.Table.from_pylist(train_rows + val_rows)),
        "config": json.dumps(asdict(config), sort_keys=True, default=str),
    }


def finetune_training_run(run: dict) -> TrainingRun:
    """`model_runs` facts of `finetune_proposer`'s run: train_loss per optimizer step (step_kind `step`)
    and val_loss per epoch (`epoch`); chosen marks the last of each, the adapter that was saved."""
    steps = [{"train_loss": loss} for loss in run["train_loss_per_step"]]
    epochs = [{"val_loss": loss} for loss in run["val_loss_per_epoch"]]
    return TrainingRun(
        "finetune",
        run["data_sha256"],
        run["config"],
        json.loads(run["config"])["seed"],
        facts("step", steps, chosen=len(steps)) + facts("epoch", epochs, chosen=len(epochs)),
    )


def validation_loss(model, processor, rows: list[dict], batch_size: int, device, dtype) -> float:
    """Mean token cross-entropy of the targets (continuations or completions) over the validation images."""
    import torch

    if not rows:
        return float("nan")
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch_rows in _batches(rows, batch_size):
            batch = _load(processor, batch_rows, device, dtype)
            n = int((batch["labels"] != -100).sum())
            total += float(model(**batch).loss.float()) * n
            tokens += n
    model.train()
    return total / tokens
