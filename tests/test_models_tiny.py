"""Tiny models are built from configs, offline, reproducibly, and reload like real checkpoints."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("transformers")

from models.prompts import CONTINUATIONS, risk_prompt
from models.tiny import BUILDERS, ensure_tiny_model


def weights(model_dir) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(model_dir / "model.safetensors"))


@pytest.mark.parametrize("kind", ["tiny-gemma3", "tiny-clip-vision"])
def test_same_seed_same_weights_other_seed_other_weights(kind, tmp_path):
    one = ensure_tiny_model(kind, tmp_path / "a", seed=0)
    two = ensure_tiny_model(kind, tmp_path / "b", seed=0)
    three = ensure_tiny_model(kind, tmp_path / "c", seed=1)
    w1, w2, w3 = weights(one), weights(two), weights(three)
    assert w1.keys() == w2.keys() and all(np.array_equal(w1[k], w2[k]) for k in w1)
    assert any(not np.array_equal(w1[k], w3[k]) for k in w1)
    if (one / "tokenizer.json").exists():
        assert (one / "tokenizer.json").read_bytes() == (two / "tokenizer.json").read_bytes()


def test_ensure_reuses_a_built_model_and_rebuilds_for_another_seed(tmp_path):
    path = ensure_tiny_model("tiny-clip-vision", tmp_path, seed=0)
    first = weights(path)
    stamp = os.stat(path / "model.safetensors").st_mtime_ns
    assert ensure_tiny_model("tiny-clip-vision", tmp_path, seed=0) == path
    assert os.stat(path / "model.safetensors").st_mtime_ns == stamp
    assert ensure_tiny_model("tiny-clip-vision", tmp_path, seed=5) == path
    rebuilt = weights(path)
    assert any(not np.array_equal(first[k], rebuilt[k]) for k in first)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no staging folder left behind


@pytest.mark.parametrize("kind", ["tiny-gemma3", "tiny-llava"])
def test_vlm_reloads_and_scores_like_a_real_checkpoint(kind, tmp_path):
    """Loaded with the Auto classes from the local directory only; the shared-prefix scorer agrees
    with a naive pass on both architectures (Gemma3 with its bidirectional image block, LLaVA)."""
    from PIL import Image

    from models import scorer, scorer_batches

    path = ensure_tiny_model(kind, tmp_path, seed=0)
    model, processor, _, _ = scorer.load_model(str(path), device="cpu")
    assert (
        type(model).__name__
        == {"tiny-gemma3": "Gemma3ForConditionalGeneration", "tiny-llava": "LlavaForConditionalGeneration"}[kind]
    )
    tokenizer = processor.tokenizer
    ids = tokenizer(risk_prompt(55.0, "female", "anterior torso") + CONTINUATIONS["high"])["input_ids"]
    assert tokenizer.unk_token_id not in ids
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8))
    prompt = risk_prompt(None, "male", "back")
    batched = scorer_batches.score_batch(model, processor, [image], [prompt])
    naive = scorer_batches.naive_continuation_loglik(model, processor, image, prompt)
    assert np.abs(batched[0] - naive).max() < 1e-5


def test_clip_vision_tower_reloads_and_gives_features(tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    path = ensure_tiny_model("tiny-clip-vision", tmp_path, seed=0)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    processor = AutoImageProcessor.from_pretrained(path, local_files_only=True)
    assert type(model).__name__ == "CLIPVisionModel"
    pixels = processor(images=[Image.new("RGB", (50, 40), (120, 80, 60))] * 3, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        features = model(pixel_values=pixels).pooler_output
    assert features.shape == (3, model.config.hidden_size) and torch.isfinite(features).all()


def test_every_builder_writes_a_manifest(tmp_path):
    import json

    for kind in BUILDERS:
        path = ensure_tiny_model(kind, tmp_path, seed=3)
        manifest = json.loads((path / "tiny_model.json").read_text())
        assert manifest["kind"] == kind and manifest["seed"] == 3


def test_the_morph_kind_writes_the_completion_in_few_tokens_and_can_reach_confident_logits(tmp_path):
    """Issue 32: tiny-gemma3-morph's tokenizer learnt the completion format (the risk kind needs twice
    the tokens), its lm_head is untied from the embeddings at std 4/sqrt(width), and `dims` widens its
    text tower; a folder is reused only for the same seed and dims."""
    import json

    from transformers import AutoModelForImageTextToText, AutoProcessor

    from models.morph_task import target_completion
    from models.tiny import LOGIT_SCALE, text_dims

    completion = target_completion("MEL")
    path = ensure_tiny_model("tiny-gemma3-morph", tmp_path / "morph", seed=0)
    morph_ids = AutoProcessor.from_pretrained(path, backend="pil").tokenizer(completion)["input_ids"]
    risk = ensure_tiny_model("tiny-gemma3", tmp_path / "risk", seed=0)
    risk_ids = AutoProcessor.from_pretrained(risk, backend="pil").tokenizer(completion)["input_ids"]
    assert len(morph_ids) <= 40 < 2 * len(morph_ids) <= len(risk_ids)
    model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
    head, embeddings = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert head.data_ptr() != embeddings.data_ptr()
    assert abs(float(head.std()) * head.shape[1] ** 0.5 - LOGIT_SCALE) < 0.3

    wide = ensure_tiny_model("tiny-gemma3-morph", tmp_path / "morph", seed=0, dims=text_dims(64, 3))
    text = json.loads((wide / "config.json").read_text())["text_config"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["head_dim"]) == (64, 3, 32)
    narrow = ensure_tiny_model("tiny-gemma3-morph", tmp_path / "morph", seed=0)
    assert json.loads((narrow / "config.json").read_text())["text_config"]["hidden_size"] == 32


def test_text_dims_are_checked_and_only_the_morph_kind_takes_them(tmp_path):
    from models.tiny import text_dims

    with pytest.raises(ValueError, match="multiple of 16"):
        text_dims(40, 2)
    with pytest.raises(ValueError, match="multiple of 16 and a layer"):
        text_dims(64, 0)
    with pytest.raises(ValueError, match="tiny-llava has fixed dimensions"):
        ensure_tiny_model("tiny-llava", tmp_path, dims=text_dims(64, 2))
    assert not (tmp_path / "tiny-llava").exists()
