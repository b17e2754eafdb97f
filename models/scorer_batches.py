"""The scorer's batches: images decoded and run through the processor (in a prefetch thread while the
model runs the previous batch), the four continuations scored by one of the forward passes of
models/scorer_passes.py, and the oracle those passes are tested against (one unpadded pass per
continuation). models/scorer.py runs them over a cohort with its cache."""

from __future__ import annotations

import io

import numpy as np

from autheval.vocabulary import RISK_LEVELS
from models.prompts import CONTINUATIONS, PROMPT_ID, chat_messages, risk_prompt
from models.scorer_passes import model_inputs, score_padded_rows, score_shared_prefix

METHODS = ("shared_prefix", "padded_rows", "reference")


def continuation_token_ids(processor) -> list[list[int]]:
    """Each continuation tokenized alone, without special tokens (spec 5.1 step 1)."""
    tokenizer = processor.tokenizer
    return [tokenizer(CONTINUATIONS[level], add_special_tokens=False)["input_ids"] for level in RISK_LEVELS]


def pad_token_id(processor) -> int:
    tokenizer = processor.tokenizer
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def encode_prompts(processor, images: list, prompts: list[str], padding_side: str = "right") -> dict:
    """Chat template + processor for a batch, right-padded (real prompt tokens first in every row); left
    for generation (models/grpo.py: every row continues from its last real token)."""
    processor.tokenizer.padding_side = padding_side
    conversations = [chat_messages(image, text) for image, text in zip(images, prompts)]
    return processor.apply_chat_template(
        conversations,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"padding": True},
    )


# ---------------------------------------------------------------- scoring a batch


def score_batch(model, processor, images: list, prompts: list[str], method: str = "shared_prefix") -> np.ndarray:
    """(B, 4) mean token log-likelihoods of the four continuations for B (image, prompt) pairs."""
    return score_encoded(model, processor, encode_prompts(processor, images, prompts), method)


def score_encoded(
    model, processor, encoded: dict, method: str = "shared_prefix", tokens: tuple[list[list[int]], int] | None = None
) -> np.ndarray:
    """score_batch after the processor: the part that runs on the accelerator. `tokens` = (continuation
    ids, pad id) when the caller has them (then the tokenizer is not touched here)."""
    import torch

    cont_ids, pad_id = tokens if tokens is not None else (continuation_token_ids(processor), pad_token_id(processor))
    with torch.inference_mode():
        if method == "shared_prefix":
            return score_shared_prefix(model, encoded, cont_ids, pad_id)
        if method in ("padded_rows", "reference"):
            return score_padded_rows(model, encoded, cont_ids, pad_id, all_logits=method == "reference")
    raise ValueError(f"unknown scoring method {method!r}; expected one of {METHODS}")


def prepare_batch(processor, rows: list[dict]) -> dict:
    """Decode the images and run the processor for one batch of input rows (CPU work). A row carries
    `image_path` (or an in-memory `image`), the public metadata and optionally the `prompt_id` of a
    declared prompt variant (default: the spec prompt)."""
    pictures = [row["image"] if "image" in row else open_rgb(row["image_path"]) for row in rows]
    prompts = [
        risk_prompt(row.get("age"), row.get("sex"), row.get("anatomic_site"), row.get("prompt_id", PROMPT_ID))
        for row in rows
    ]
    return encode_prompts(processor, pictures, prompts)


def score_rows(model, processor, rows: list[dict], batch_size: int, method: str = "shared_prefix"):
    """Yield (batch rows, (B, 4) log-likelihoods) batch by batch. The next batch is decoded and
    preprocessed in a background thread while the current one runs on the model, so image decoding
    and resizing (CPU work for every image) do not leave the GPU idle."""
    batches = [rows[begin : begin + batch_size] for begin in range(0, len(rows), batch_size)]
    if not batches:
        return
    # read here, once, so that only the prefetch thread uses the (not thread-safe) fast tokenizer
    tokens = (continuation_token_ids(processor), pad_token_id(processor))
    for batch, encoded in prefetched(batches, lambda batch: prepare_batch(processor, batch)):
        yield batch, score_encoded(model, processor, encoded, method, tokens)


def prefetched(batches: list, prepare):
    """Yield (batch, prepare(batch)) in order, the next batch prepared in a background thread while the
    caller works on this one (one in flight). `prepare` is the only code that runs on that thread."""
    from concurrent.futures import ThreadPoolExecutor

    if not batches:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorer-prefetch") as pool:
        upcoming = pool.submit(prepare, batches[0])
        for k, batch in enumerate(batches):
            prepared = upcoming.result()
            if k + 1 < len(batches):
                upcoming = pool.submit(prepare, batches[k + 1])
            yield batch, prepared


def naive_continuation_loglik(model, processor, image, prompt: str) -> np.ndarray:
    """The oracle: for each continuation a separate, unpadded forward pass over prompt + continuation."""
    import torch

    encoded = model_inputs(model, encode_prompts(processor, [image], [prompt]))
    length = encoded["input_ids"].shape[1]
    out = []
    for ids in continuation_token_ids(processor):
        cont = torch.tensor([ids], device=model.device)
        forward = {"input_ids": torch.cat([encoded["input_ids"], cont], dim=1)}
        forward["attention_mask"] = torch.ones_like(forward["input_ids"])
        if "token_type_ids" in encoded:
            forward["token_type_ids"] = torch.cat([encoded["token_type_ids"], torch.zeros_like(cont)], dim=1)
        if "pixel_values" in encoded:
            forward["pixel_values"] = encoded["pixel_values"]
        with torch.inference_mode():
            logits = model(**forward, use_cache=False).logits[0, length - 1 : length - 1 + len(ids)].double()
        out.append(float(torch.log_softmax(logits, dim=-1)[torch.arange(len(ids)), cont[0]].mean()))
    return np.array(out)


def open_rgb(path: str):
    """An image file as 8-bit RGB. Single-channel 16-bit images are scaled to 8 bits (their high byte, as
    Pillow reduces 16-bit RGB); Pillow's own convert clips them to white. 32-bit pixels have no declared
    range and are refused."""
    from PIL import Image

    from autheval.errors import RecordError
    from autheval.raw.phash import read_image_bytes

    with Image.open(io.BytesIO(read_image_bytes(path))) as image:
        if image.mode.startswith("I;16"):
            gray = (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
            return Image.fromarray(gray).convert("RGB")
        if image.mode in ("I", "F"):
            raise RecordError(
                str(path),
                None,
                f"32-bit pixels (mode {image.mode}) have no declared range; "
                "save the image with 8 or 16 bits per channel",
            )
        return image.convert("RGB")
