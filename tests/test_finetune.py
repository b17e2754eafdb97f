"""LoRA fine-tuning of the tiny Gemma3 on CPU: two steps change the adapter, the loss is finite, the
adapter is a local directory the scorer reads as its own mechanism. DeepSpeed ZeRO-2 itself runs in one
slow test (its first CPU run JIT-builds a comm op)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("peft")

from models import scorer
from models.finetune import FinetuneConfig, finetune_proposer, lora_model
from models.tiny import ensure_tiny_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    return ensure_tiny_model("tiny-gemma3", tmp_path_factory.getbasetemp() / "tiny-models", seed=0)


def labelled_images(folder: Path, n: int) -> pa.Table:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
        rows.append(
            {
                "image_id": f"img{i}",
                "image_path": str(path),
                "age": 40.0 + i,
                "sex": "female",
                "anatomic_site": "back",
                "ideal_action_level": i % 4,
            }
        )
    return pa.Table.from_pylist(rows)


def adapter_tensors(adapter_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))


def initial_adapter(config: FinetuneConfig) -> dict:
    import torch
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(config.model_dir, local_files_only=True)
    torch.manual_seed(config.seed)
    model = lora_model(base, config)
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def tiny_config(model_dir, adapter_dir, **overrides) -> FinetuneConfig:
    settings = dict(
        model_dir=str(model_dir),
        adapter_dir=str(adapter_dir),
        max_steps=2,
        batch_size=2,
        lr=1e-2,
        lora_r=4,
        lora_alpha=8,
        device="cpu",
    )
    return FinetuneConfig(**{**settings, **overrides})


def test_two_lora_steps_change_the_adapter_and_the_scorer_reads_it(tiny_gemma3, tmp_path):
    table = labelled_images(tmp_path / "images", 6)
    config = tiny_config(tiny_gemma3, tmp_path / "adapter")
    meta = finetune_proposer(table.slice(0, 4), table.slice(4), config)

    assert meta["engine"] == "torch+peft" and meta["steps"] == 2 and meta["device"] == "cpu"
    assert len(meta["train_loss_per_step"]) == 2 and all(math.isfinite(x) for x in meta["train_loss_per_step"])
    assert len(meta["val_loss_per_epoch"]) == 1 and math.isfinite(meta["val_loss_per_epoch"][0])
    assert meta["adapter_dir"] == str(tmp_path / "adapter")
    assert_the_training_run_is_the_losses(meta, config)

    trained = adapter_tensors(meta["adapter_dir"])
    before = initial_adapter(config)
    assert trained and len(trained) == len(before)
    changed = {
        k
        for k in trained
        if not np.allclose(trained[k].numpy(), before[k.replace(".weight", ".default.weight")].numpy())
    }
    assert {k for k in trained if "lora_B" in k} <= changed  # B starts at zero, so it moved
    assert any("lora_A" in k for k in changed)

    images = table.slice(4).select(["image_id", "image_path", "age", "sex", "anatomic_site"])
    base_rows, _ = scorer.score_images(
        images, scorer.ScorerConfig(model_dir=str(tiny_gemma3), device="cpu"), tmp_path / "cache", progress=False
    )
    tuned_config = scorer.ScorerConfig(model_dir=str(tiny_gemma3), adapter_dir=meta["adapter_dir"], device="cpu")
    tuned_rows, tuned_meta = scorer.score_images(images, tuned_config, tmp_path / "cache", progress=False)
    assert tuned_meta["model"] == "tiny-gemma3+adapter" and tuned_meta["images_scored"] == 2
    assert not np.allclose(base_rows.column("ll_high").to_numpy(), tuned_rows.column("ll_high").to_numpy(), atol=1e-6)


def assert_the_training_run_is_the_losses(meta: dict, config: FinetuneConfig):
    """Issue 16 item 3: the rows `model_runs` keeps: train_loss per step, val_loss per epoch, the last chosen."""
    from models.finetune import finetune_training_run
    from models.training_runs import SCHEMA

    rows = finetune_training_run(meta).table("VLM LoRA fine-tuned", "tiny-gemma3+adapter", "rev").to_pylist()
    assert [(r["step_kind"], r["step"], r["metric"], r["value"], r["chosen"]) for r in rows] == [
        ("step", 1, "train_loss", meta["train_loss_per_step"][0], False),
        ("step", 2, "train_loss", meta["train_loss_per_step"][1], True),
        ("epoch", 1, "val_loss", meta["val_loss_per_epoch"][0], True),
    ]
    assert {r["data_sha256"] for r in rows} == {meta["data_sha256"]} and {r["seed"] for r in rows} == {config.seed}
    assert json.loads(rows[0]["config"])["max_steps"] == 2 and rows[0]["config"] == meta["config"]
    assert SCHEMA.names == list(rows[0])


def test_finetune_needs_the_target_column(tiny_gemma3, tmp_path):
    from autheval.errors import RecordError

    table = labelled_images(tmp_path / "images", 2).drop_columns(["ideal_action_level"])
    with pytest.raises(RecordError, match="ideal_action_level"):
        finetune_proposer(table, table, tiny_config(tiny_gemma3, tmp_path / "adapter"))


DEEPSPEED_RUN = """
import json, sys
from pathlib import Path
import pyarrow.parquet as pq
from models.finetune import FinetuneConfig, finetune_proposer
table = pq.read_table(sys.argv[1])
config = FinetuneConfig(**json.loads(sys.argv[2]))
print("METADATA " + json.dumps(finetune_proposer(table.slice(0, 4), table.slice(4), config)))
"""


@pytest.mark.slow
def test_deepspeed_zero2_on_cpu(tiny_gemma3, tmp_path):
    """ZeRO-2 through deepspeed.initialize on the CPU accelerator (gloo, one process), in a child process
    so the process group does not outlive the test. The first run on a machine JIT-builds DeepSpeed's
    shared-memory comm op (60-180 s); later runs reuse ~/.cache/torch_extensions."""
    pytest.importorskip("deepspeed")
    import pyarrow.parquet as pq

    table = labelled_images(tmp_path / "images", 6)
    pq.write_table(table, tmp_path / "images.parquet")
    config = tiny_config(tiny_gemma3, tmp_path / "adapter", use_deepspeed=True, zero_stage=2).__dict__
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_RUN, str(tmp_path / "images.parquet"), json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("METADATA "))[9:])
    assert meta["engine"] == "deepspeed zero-2" and meta["steps"] == 2
    assert all(math.isfinite(x) for x in meta["train_loss_per_step"] + meta["val_loss_per_epoch"])
    trained = adapter_tensors(meta["adapter_dir"])
    assert any(float(v.abs().max()) > 0 for k, v in trained.items() if "lora_B" in k)


# ---------------------------------------------------------------- issue 21: refused in one line


@pytest.mark.parametrize(
    "field, value", [("epochs", 0), ("max_steps", 0), ("batch_size", 0), ("epochs", 1.5), ("lr", float("nan"))]
)
def test_a_config_that_would_save_an_untrained_adapter_is_refused(tmp_path, field, value):
    with pytest.raises(ValueError, match=f"FinetuneConfig.{field} must be a positive"):
        tiny_config(tmp_path / "base", tmp_path / "adapter", **{field: value})


def test_no_training_images_saves_no_adapter(tiny_gemma3, tmp_path):
    table = labelled_images(tmp_path / "images", 2)
    with pytest.raises(ValueError, match="no training images"):
        finetune_proposer(table.slice(0, 0), table, tiny_config(tiny_gemma3, tmp_path / "adapter"))
    assert not (tmp_path / "adapter").exists()


def test_a_completion_target_needs_its_prompt_and_completion_text(tiny_gemma3, tmp_path):
    """Issue 32: `target="completion"` rows bring their own instruction and target text; a missing
    column or an empty text is one line naming the column (and row), and no adapter is saved."""
    from autheval.errors import RecordError

    table = labelled_images(tmp_path / "images", 2)
    config = tiny_config(tiny_gemma3, tmp_path / "adapter", target="completion")
    with pytest.raises(RecordError, match="column 'prompt': required column is missing"):
        finetune_proposer(table, table, config)
    table = table.append_column("prompt", pa.array(["describe the lesion"] * 2))
    table = table.append_column("completion", pa.array(["<morph>{}</morph>", "  "]))
    with pytest.raises(RecordError, match="column 'completion': must be non-empty text") as err:
        finetune_proposer(table, table, config)
    assert "row 2" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "adapter").exists()
    with pytest.raises(ValueError, match="FinetuneConfig.target must be one of risk_level, completion"):
        tiny_config(tiny_gemma3, tmp_path / "adapter", target="levels")


def test_target_levels_outside_the_four_are_refused(tiny_gemma3, tmp_path):
    from autheval.errors import RecordError

    table = labelled_images(tmp_path / "images", 2)
    table = table.set_column(table.column_names.index("ideal_action_level"), "ideal_action_level", pa.array([1, 4]))
    with pytest.raises(RecordError, match="levels must be integers 0..3"):
        finetune_proposer(table, table, tiny_config(tiny_gemma3, tmp_path / "adapter"))


def test_an_adapter_of_another_base_model_is_refused(tiny_gemma3, tmp_path):
    """peft applied an adapter to any base with the same module names. The fine-tune records its base's
    content hash; an adapter made elsewhere names its base in adapter_config.json."""
    from autheval.errors import RecordError

    table = labelled_images(tmp_path / "images", 2)
    meta = finetune_proposer(table, table, tiny_config(tiny_gemma3, tmp_path / "adapter", max_steps=1))
    adapter = Path(meta["adapter_dir"])
    scorer.check_adapter_base(tiny_gemma3, adapter)  # its own base: accepted
    other = ensure_tiny_model("tiny-gemma3", tmp_path / "other", seed=1)  # same name and shape, other weights
    with pytest.raises(RecordError, match="trained on another base model") as err:
        scorer.load_model(str(other), str(adapter), device="cpu")
    assert str(adapter) in str(err.value) and "\n" not in str(err.value)

    (adapter / "finetune_metadata.json").unlink()  # an adapter made elsewhere
    config = json.loads((adapter / "adapter_config.json").read_text())
    scorer.check_adapter_base(tiny_gemma3, adapter)  # names this directory
    (adapter / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "google/medgemma-4b-it"})
    )
    with pytest.raises(RecordError, match="names base model 'google/medgemma-4b-it'"):
        scorer.load_model(str(tiny_gemma3), str(adapter), device="cpu")
