"""Tiny randomly initialised models, built from configs and saved as local directories, so tests, CI
and the synthetic demo run the real transformers code path on CPU in seconds with nothing downloaded.

Each directory loads like a real checkpoint: `AutoProcessor.from_pretrained(dir)` and
`<ModelClass>.from_pretrained(dir)`. The tokenizer is a byte-level BPE trained here on the study's own
prompt text (so every metadata value tokenizes, no unknown tokens), wrapped in PreTrainedTokenizerFast
with the special tokens the processor and chat template need. The same seed gives the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from models.prompts import CONTINUATIONS, PROMPT_TEMPLATE

GEMMA3_SPECIALS = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>"}
GEMMA3_EXTRA = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
TURN_TOKENS = ["<start_of_turn>", "<end_of_turn>"]

# Gemma3's chat template reduced to what the study sends: optional system turn, [image, text] user turns.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
LLAVA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ 'USER: ' if message['role'] == 'user' else 'ASSISTANT: ' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<image>\n' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
)

IMAGE_SIZE = 32  # pixels; patch 8 -> 16 patches
PATCH_SIZE = 8
MM_TOKENS = 4  # Gemma3 pools the 4x4 patches to 2x2 soft tokens
# Wider than the usual 0.02, so random logits are far from uniform and the four continuations get
# clearly different likelihoods (a scoring bug then shows as a large difference, not one in the 7th digit).
INIT_RANGE = 0.5
# The tiny dimensions every tower shares, text and vision: 2 layers, hidden 32, 2 heads.
TINY_LAYERS = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_VISION = {**TINY_LAYERS, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}


def tokenizer_corpus() -> list[str]:
    """Text the tiny BPE learns its merges from: the prompt, continuations and typical metadata."""
    metadata = [
        "age=55.0, sex=female, anatomic_site=anterior torso",
        "age=nan, sex=male, anatomic_site=nan",
        "lower extremity upper extremity head/neck palms/soles oral/genital lateral torso posterior",
    ]
    return [PROMPT_TEMPLATE, *CONTINUATIONS.values(), *metadata, "user model USER: ASSISTANT:"]


def build_tokenizer(
    special_tokens: dict, extra_tokens: dict | None = None, plain_extra: list | None = None, vocab_size: int = 1024
):
    """A byte-level BPE tokenizer trained on `tokenizer_corpus()`, with the given special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [*special_tokens.values(), *(extra_tokens or {}).values(), *(plain_extra or [])]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, extra_special_tokens=extra_tokens or {}, model_max_length=4096, **special_tokens
    )


def _seeded(seed: int):
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _save(out: Path, kind: str, model, processor, seed: int) -> Path:
    """Save a tiny model and its processor as a checkpoint folder, with the manifest every builder
    writes the same way: kind, model class and seed (ensure_tiny_model reuses a folder by it)."""
    model.save_pretrained(out)
    processor.save_pretrained(out)
    manifest = {"kind": kind, "model_class": type(model).__name__, "seed": seed, "random_weights": True}
    (out / "tiny_model.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def _tiny_text(tokenizer, specials: dict) -> dict:
    """The text-tower settings both tiny VLMs share (one place, so the Gemma3 and Llama towers cannot
    drift apart): the tiny dimensions, one key/value head, the tokenizer's vocabulary and its pad/eos/bos
    ids, the wide initialisation."""
    ids = tokenizer.convert_tokens_to_ids
    return {
        "vocab_size": len(tokenizer),
        **TINY_LAYERS,
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        **{f"{name}_id": ids(specials[name]) for name in ("pad_token", "eos_token", "bos_token")},
        "initializer_range": INIT_RANGE,
    }


def _tiny_clip_vision():
    """The tiny CLIP vision tower and its image processor, the same for the LLaVA model and the probe's
    frozen tower."""
    from transformers import CLIPVisionConfig
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    config = CLIPVisionConfig(**TINY_VISION, projection_dim=32)
    processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return config, processor


def build_tiny_gemma3(out_dir: str | Path, seed: int = 0) -> Path:
    """Gemma3ForConditionalGeneration (SigLIP vision + Gemma3 text), 2+2 layers, hidden 32, with
    Gemma3Processor (PIL image processor, 32x32 images, 4 soft tokens per image)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    out = Path(out_dir)
    tokenizer = build_tokenizer(GEMMA3_SPECIALS, GEMMA3_EXTRA, TURN_TOKENS)
    ids = tokenizer.convert_tokens_to_ids
    text = Gemma3TextConfig(
        **_tiny_text(tokenizer, GEMMA3_SPECIALS),
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=512,
        layer_types=["sliding_attention", "full_attention"],
    )
    vision = SiglipVisionConfig(**TINY_VISION)
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=MM_TOKENS,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
        initializer_range=INIT_RANGE,
    )
    _seeded(seed)
    model = Gemma3ForConditionalGeneration(config).eval()
    image_processor = Gemma3ImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    processor = Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=MM_TOKENS,
    )
    return _save(out, "tiny-gemma3", model, processor, seed)


def build_tiny_llava(out_dir: str | Path, seed: int = 0) -> Path:
    """LlavaForConditionalGeneration (CLIP vision + Llama text), 2+2 layers, with LlavaProcessor."""
    from transformers import LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    out = Path(out_dir)
    specials = {"pad_token": "<pad>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}
    tokenizer = build_tokenizer(specials, {"image_token": "<image>"})
    ids = tokenizer.convert_tokens_to_ids
    text = LlamaConfig(**_tiny_text(tokenizer, specials))
    vision, image_processor = _tiny_clip_vision()
    n_patches = (IMAGE_SIZE // PATCH_SIZE) ** 2
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=ids("<image>"),
        image_seq_length=n_patches,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    _seeded(seed)
    model = LlavaForConditionalGeneration(config).eval()
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        chat_template=LLAVA_CHAT_TEMPLATE,
        image_token="<image>",
        num_additional_image_tokens=1,
    )
    return _save(out, "tiny-llava", model, processor, seed)


def build_tiny_clip_vision(out_dir: str | Path, seed: int = 0) -> Path:
    """CLIPVisionModel (a frozen vision tower for the probe) with its image processor."""
    from transformers import CLIPVisionModel

    out = Path(out_dir)
    config, image_processor = _tiny_clip_vision()
    _seeded(seed)
    model = CLIPVisionModel(config).eval()
    return _save(out, "tiny-clip-vision", model, image_processor, seed)


BUILDERS = {
    "tiny-gemma3": build_tiny_gemma3,
    "tiny-llava": build_tiny_llava,
    "tiny-clip-vision": build_tiny_clip_vision,
}


def ensure_tiny_model(kind: str, root: str | Path, seed: int = 0) -> Path:
    """`<root>/<kind>` built once (keyed by seed); a later call with the same seed reuses it. Built into
    a temporary folder and renamed, so a crash never leaves a half-saved model where a loader looks."""
    from warehouse.atomic import atomic_dir

    target = Path(root) / kind
    manifest = target / "tiny_model.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("seed") == seed:
        return target
    from models.device import quiet_transformers

    quiet_transformers()
    with atomic_dir(target) as staging:
        BUILDERS[kind](staging, seed=seed)
    return target
