"""Tiny randomly initialised models, built from configs and saved as local directories, so tests, CI
and the synthetic demo run the real transformers code path on CPU in seconds with nothing downloaded.

Each directory loads like a real checkpoint: `AutoProcessor.from_pretrained(dir)` and
`<ModelClass>.from_pretrained(dir)`. The tokenizer is a byte-level BPE trained here on the study's own
prompt text (so every metadata value tokenizes, no unknown tokens), wrapped in PreTrainedTokenizerFast
with the special tokens the processor and chat template need. The same seed gives the same weights.

The `-morph` kinds are the learnable ones (models/morph_task.py): their tokenizer also learns from the
morphology instruction and the `<morph>` / `<final_diagnosis>` completions (a completion is about 20
tokens instead of 85, so a few hundred CPU steps teach the format), and their weights start at the usual
0.02 scale. `text_dims` widens or deepens the text tower (`--hidden 512 --layers 4` of
benchmarks/training_curves.py on a GPU).
"""

from __future__ import annotations

import json
from functools import partial
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
TRAINABLE_INIT_RANGE = 0.02  # the -morph kinds: transformers' usual scale, from which training moves
EMBEDDING_SCALE = 1.5  # the -morph kinds' token embeddings: std 1.5 / sqrt(width) (_trainable_embeddings)
LOGIT_SCALE = 4.0  # and their lm_head, untied from the embeddings: std 4 / sqrt(width)


def text_dims(hidden: int, layers: int) -> dict:
    """A text tower `hidden` wide and `layers` deep (heads of 16 to 64 dimensions, MLP 4x wide)."""
    if hidden < 16 or hidden % 16 or layers < 1:
        raise ValueError(f"a text tower needs a width that is a multiple of 16 and a layer, got {hidden}, {layers}")
    heads = max(2, hidden // 64)
    return {
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
    }


def tokenizer_corpus(task: str = "risk") -> list[str]:
    """Text the tiny BPE learns its merges from: the prompt, continuations and typical metadata; for
    the `morph` task also the morphology instruction and its completions."""
    metadata = [
        "age=55.0, sex=female, anatomic_site=anterior torso",
        "age=nan, sex=male, anatomic_site=nan",
        "lower extremity upper extremity head/neck palms/soles oral/genital lateral torso posterior",
    ]
    corpus = [PROMPT_TEMPLATE, *CONTINUATIONS.values(), *metadata, "user model USER: ASSISTANT:"]
    if task == "morph":
        from models.morph_task import tokenizer_texts

        corpus += tokenizer_texts()
    return corpus


def build_tokenizer(
    special_tokens: dict,
    extra_tokens: dict | None = None,
    plain_extra: list | None = None,
    vocab_size: int = 1024,
    task: str = "risk",
):
    """A byte-level BPE tokenizer trained on `tokenizer_corpus(task)`, with the given special tokens."""
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
    bpe.train_from_iterator(tokenizer_corpus(task), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, extra_special_tokens=extra_tokens or {}, model_max_length=4096, **special_tokens
    )


def _seeded(seed: int):
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _save(out: Path, kind: str, model, processor, seed: int, dims: dict | None = None) -> Path:
    """Save a tiny model and its processor as a checkpoint folder, with the manifest every builder
    writes the same way: kind, model class, seed and text dimensions (ensure_tiny_model reuses a
    folder by them)."""
    model.save_pretrained(out)
    processor.save_pretrained(out)
    manifest = {"kind": kind, "model_class": type(model).__name__, "seed": seed, "random_weights": True}
    if dims:
        manifest["text_dims"] = dims
    (out / "tiny_model.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def _tiny_text(tokenizer, specials: dict, dims: dict | None = None, init_range: float = INIT_RANGE) -> dict:
    """The text-tower settings both tiny VLMs share (one place, so the Gemma3 and Llama towers cannot
    drift apart): the tiny dimensions (or `dims`), one key/value head, the tokenizer's vocabulary and its
    pad/eos/bos ids, the initialisation (wide unless a trainable kind asks otherwise)."""
    ids = tokenizer.convert_tokens_to_ids
    return {
        "vocab_size": len(tokenizer),
        **TINY_LAYERS,
        **(dims or {}),
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        **{f"{name}_id": ids(specials[name]) for name in ("pad_token", "eos_token", "bos_token")},
        "initializer_range": init_range,
    }


def _trainable_embeddings(model) -> None:
    """Redraw the token embeddings at std EMBEDDING_SCALE / sqrt(width) and the (untied) lm_head at std
    LOGIT_SCALE / sqrt(width). Both stay frozen under LoRA, so the adapter can only turn the final hidden
    state (unit RMS after the last norm); at the usual 0.02 its logits could reach at most 0.02 x width
    (0.64 at width 32), every next-token distribution near uniform, and a sampled completion noise
    whatever the adapter learns. At LOGIT_SCALE a learnt token can reach a logit of LOGIT_SCALE x
    sqrt(width) (23 at width 32) against random logits of spread LOGIT_SCALE, so sampling at
    temperature 1 (GRPO's) can follow the format."""
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        embeddings.normal_(0.0, EMBEDDING_SCALE / embeddings.shape[1] ** 0.5)
        head = model.get_output_embeddings().weight
        head.normal_(0.0, LOGIT_SCALE / head.shape[1] ** 0.5)


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


def build_tiny_gemma3(out_dir: str | Path, seed: int = 0, task: str = "risk", dims: dict | None = None) -> Path:
    """Gemma3ForConditionalGeneration (SigLIP vision + Gemma3 text), 2+2 layers, hidden 32 (text: or
    `dims`), with Gemma3Processor (PIL image processor, 32x32 images, 4 soft tokens per image); `task`
    "morph": the learnable kind (module docstring)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    out = Path(out_dir)
    tokenizer = build_tokenizer(GEMMA3_SPECIALS, GEMMA3_EXTRA, TURN_TOKENS, task=task)
    ids = tokenizer.convert_tokens_to_ids
    init_range = TRAINABLE_INIT_RANGE if task == "morph" else INIT_RANGE
    text_settings = _tiny_text(tokenizer, GEMMA3_SPECIALS, dims, init_range)
    head_dim = text_settings["hidden_size"] // text_settings["num_attention_heads"]
    untied = {"tie_word_embeddings": False} if task == "morph" else {}
    text = Gemma3TextConfig(
        **text_settings,
        **untied,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        sliding_window=512,
        layer_types=["sliding_attention", "full_attention"] * (text_settings["num_hidden_layers"] // 2)
        + ["full_attention"] * (text_settings["num_hidden_layers"] % 2),
    )
    vision = SiglipVisionConfig(**TINY_VISION)
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=MM_TOKENS,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
        initializer_range=init_range,
        **untied,
    )
    _seeded(seed)
    model = Gemma3ForConditionalGeneration(config).eval()
    if task == "morph":
        _trainable_embeddings(model)
    image_processor = Gemma3ImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    processor = Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=MM_TOKENS,
    )
    return _save(out, "tiny-gemma3" + ("-morph" if task == "morph" else ""), model, processor, seed, dims)


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
    "tiny-gemma3-morph": partial(build_tiny_gemma3, task="morph"),
    "tiny-llava": build_tiny_llava,
    "tiny-clip-vision": build_tiny_clip_vision,
}
SIZED = ("tiny-gemma3-morph",)  # the kinds whose text tower `dims` may widen


def ensure_tiny_model(kind: str, root: str | Path, seed: int = 0, dims: dict | None = None) -> Path:
    """`<root>/<kind>` built once (keyed by seed and text dimensions); a later call with the same ones
    reuses it. Built into a temporary folder and renamed, so a crash never leaves a half-saved model
    where a loader looks."""
    from warehouse.atomic import atomic_dir

    if dims and kind not in SIZED:
        raise ValueError(f"{kind} has fixed dimensions; text dimensions are for {', '.join(SIZED)}")
    target = Path(root) / kind
    manifest = target / "tiny_model.json"
    if manifest.exists():
        built = json.loads(manifest.read_text())
        if built.get("seed") == seed and built.get("text_dims") == (dims or None):
            return target
    from models.device import quiet_transformers

    quiet_transformers()
    with atomic_dir(target) as staging:
        BUILDERS[kind](staging, seed=seed, **({"dims": dims} if dims else {}))
    return target
