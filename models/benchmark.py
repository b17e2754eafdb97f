"""Benchmark items scored by option likelihood (DermoGPT spec section 7) with the scorer's parts: its
model loading and revision (models/scorer.py), its batches, processor and prefetch thread
(models/scorer_batches.py), its shared-prefix pass with each row's own continuations
(models/scorer_passes.py) and its resumable cache (models/cache.py).

An item is (image, question, options). Its prompt is the question with the options listed (letters A,
B, ...) and "Answer:"; each option's text, after one space, is a continuation, and its score is the mean
token log-likelihood of that continuation (the scorer's measure for the four risk continuations, spec
5.1). The model's answer is the option with the highest score (ties to the first listed); `prob` is
the softmax of the scores in float64. Items are batched by their number of options (one pass runs the
same number of continuations per row), in input order within a count.

Cache: `<cache_dir>/<key>/part-*.parquet`, keyed by (model, revision, prompt id, item id,
input_sha256), where input_sha256 is the SHA-256 of the prompt text, the options and the image file's
bytes: an edited question or a replaced image is scored again, everything else is served. Finished
items are written every `chunk_images` items and when a run fails, each part atomically; a rerun scores
only what is missing. Only the shared-prefix pass takes per-row continuations: a model whose key/value
cache cannot be repeated (the scorer's `padded_rows` fallback) is not supported here.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from models import cache
from models.scorer import ScorerConfig, load_model, model_revision

PROMPT_ID = "benchmark_mcq_v1"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
KEY_COLUMNS = ("model", "revision", "prompt_id", "item_id", "input_sha256")
# What the cache and the benchmark tables share: an item's key (every key column a string) and its
# options' scores, then the device and dtype that scored it
_ITEM_FIELDS = [
    *((column, pa.string()) for column in KEY_COLUMNS),
    ("options", pa.list_(pa.string())),
    ("loglik", pa.list_(pa.float64())),
]
_RUN_FIELDS = [("device", pa.string()), ("dtype", pa.string())]
CACHE_SCHEMA = pa.schema(
    [
        *_ITEM_FIELDS,
        ("n_tokens", pa.list_(pa.int32())),
        ("method", pa.string()),
        *_RUN_FIELDS,
        ("scored_at", pa.timestamp("us", tz="UTC")),
    ]
)
# What the benchmark tables keep of a scored item (no time stamp: same inputs, same bytes)
SCORE_SCHEMA = pa.schema([*_ITEM_FIELDS, ("prob", pa.list_(pa.float64())), ("choice", pa.int32()), *_RUN_FIELDS])
ITEM_COLUMNS = ("item_id", "image_path", "question", "options")


def benchmark_prompt(question: str, options: list[str]) -> str:
    """The item's prompt: its question, the options listed with letters, then 'Answer:'."""
    if len(options) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} options per item, got {len(options)}")
    listed = "\n".join(f"{LETTERS[k]}. {option}" for k, option in enumerate(options))
    return f"{question}\nOptions:\n{listed}\nAnswer:"


def option_continuation(option: str) -> str:
    return " " + option


def item_sha256(prompt: str, options: list[str], image_path: str) -> str:
    """SHA-256 of what reaches the model for one item: the prompt text, the options and the image bytes."""
    from autheval.raw.phash import read_image_bytes

    digest = hashlib.sha256(prompt.encode("utf-8"))
    digest.update(b"\0" + json.dumps(list(options), ensure_ascii=False).encode("utf-8") + b"\0")
    digest.update(read_image_bytes(image_path))
    return digest.hexdigest()


def option_probabilities(loglik: list[float]) -> np.ndarray:
    """softmax of an item's option scores in float64."""
    values = np.asarray(loglik, dtype=np.float64)
    shifted = np.exp(values - values.max())
    return shifted / shifted.sum()


# ---------------------------------------------------------------- the cache


def _servable(part: Path, table: pa.Table) -> np.ndarray:
    """Rows whose (model, revision, prompt id) is their folder's key."""
    triples = list(zip(*(table.column(c).to_pylist() for c in ("model", "revision", "prompt_id"))))
    tags = {t: cache.key_tag(*t) for t in set(triples)}
    return np.fromiter((tags[t] == part.parent.name for t in triples), dtype=bool, count=len(triples))


def read_scores(directory: Path) -> pa.Table:
    """The servable rows of one key's folder, one per key (first part wins)."""
    _, table, _ = cache.read_directory(directory, CACHE_SCHEMA, _servable)
    return cache.first_per_key(table, KEY_COLUMNS)


def _compact(directory: Path) -> None:
    """Merge a key's parts into one after a run (the merged part lands before the old ones go); one
    process at a time (models/cache.py compaction_lock)."""
    with cache.compaction_lock(directory) as mine:
        parts = cache.part_paths(directory)
        if not mine or len(parts) <= 1:
            return
        parts, _, read = cache.read_directory(directory, CACHE_SCHEMA)
        ours = [(part, table) for part, table in zip(parts, read) if _servable(part, table).all()]
        if len(ours) <= 1:
            return
        cache.write_part(directory, cache.first_per_key(pa.concat_tables([t for _, t in ours]), KEY_COLUMNS))
        cache.remove_parts([part for part, _ in ours])


# ---------------------------------------------------------------- the run


def _prepare(processor, batch: list[dict]) -> tuple[dict, list[list[list[int]]]]:
    """Images decoded, prompts through the processor and each item's options tokenized (the prefetch
    thread's work: only it touches the tokenizer during a run)."""
    from models.scorer_batches import encode_prompts, open_rgb

    encoded = encode_prompts(
        processor, [open_rgb(row["image_path"]) for row in batch], [row["prompt"] for row in batch]
    )
    tokenizer = processor.tokenizer
    options = [
        [tokenizer(option_continuation(o), add_special_tokens=False)["input_ids"] for o in row["options"]]
        for row in batch
    ]
    for row, ids in zip(batch, options):
        empty = [o for o, tokens in zip(row["options"], ids) if not tokens]
        if empty:
            raise ValueError(f"benchmark item {row['item_id']!r}: option {empty[0]!r} tokenizes to nothing")
    return encoded, options


def _batches(rows: list[dict], batch_size: int) -> list[list[dict]]:
    """Rows grouped by their number of options (input order within a count), then cut into batches."""
    by_count: dict[int, list[dict]] = {}
    for row in rows:
        by_count.setdefault(len(row["options"]), []).append(row)
    return [
        group[i : i + batch_size] for _, group in sorted(by_count.items()) for i in range(0, len(group), batch_size)
    ]


def score_benchmark(
    items: pa.Table,
    config: ScorerConfig,
    cache_dir: str | Path,
    *,
    on_batch: Callable[[int], None] | None = None,
    load: Callable[[], tuple] | None = None,
) -> tuple[pa.Table, dict]:
    """Score every item of `items` (item_id, image_path, question, options) not yet in the cache with
    the same input; return one SCORE_SCHEMA row per item in input order and the run's metadata.
    `on_batch(n_done)` runs after each scored batch (progress; tests interrupt a run with it). `load()`
    gives (model, processor, device, dtype) when the caller holds the model; by default it is loaded
    here, and only when an item is left to score."""
    import datetime as dt

    import torch

    from autheval.io import table_sha256
    from models.device import dtype_name
    from models.scorer_batches import pad_token_id, prefetched
    from models.scorer_passes import score_shared_prefix

    missing = [c for c in ITEM_COLUMNS if c not in items.column_names]
    if missing:
        raise ValueError(f"benchmark items need the column {missing[0]!r}")
    ids = items.column("item_id").to_pylist()
    if len(set(ids)) != len(ids):
        raise ValueError("benchmark item ids must be unique")
    model_name, revision = config.name(), model_revision(config)
    directory = cache.key_directory(cache_dir, model_name, revision, PROMPT_ID)
    rows = items.select(list(ITEM_COLUMNS)).to_pylist()
    for row in rows:
        row["prompt"] = benchmark_prompt(row["question"], row["options"])
        row["input_sha256"] = item_sha256(row["prompt"], row["options"], row["image_path"])
    cached = read_scores(directory)
    done = set(zip(cached.column("item_id").to_pylist(), cached.column("input_sha256").to_pylist()))
    todo = [row for row in rows if (row["item_id"], row["input_sha256"]) not in done]

    started = time.perf_counter()
    device_name = dtype_text = None
    scoring_s = load_s = 0.0
    if todo:
        model, processor, device, dtype = (
            load() if load is not None else load_model(config.model_dir, config.adapter_dir, config.device)
        )
        device_name, dtype_text = str(device), dtype_name(dtype)
        load_s = time.perf_counter() - started
        pad = pad_token_id(processor)
        scoring_started = time.perf_counter()
        pending: list[dict] = []
        n_done = 0
        try:
            for batch, (encoded, options) in prefetched(
                _batches(todo, config.batch_size), lambda batch: _prepare(processor, batch)
            ):
                with torch.inference_mode():
                    loglik = score_shared_prefix(model, encoded, [], pad, row_cont_ids=options)
                bad = ~np.isfinite(loglik).all(axis=1)
                if bad.any():  # a broken model leaves nothing to reuse
                    k = int(np.flatnonzero(bad)[0])
                    raise ValueError(
                        f"model {config.model_dir} gave non-finite option log-likelihoods for "
                        f"benchmark item {batch[k]['item_id']!r}; none of its batch is cached"
                    )
                now = dt.datetime.now(dt.UTC)
                pending += [
                    {
                        "model": model_name,
                        "revision": revision,
                        "prompt_id": PROMPT_ID,
                        "item_id": row["item_id"],
                        "input_sha256": row["input_sha256"],
                        "options": list(row["options"]),
                        "loglik": [float(x) for x in ll],
                        "n_tokens": [len(t) for t in tokens],
                        "method": "shared_prefix",
                        "device": device_name,
                        "dtype": dtype_text,
                        "scored_at": now,
                    }
                    for row, ll, tokens in zip(batch, loglik, options)
                ]
                n_done += len(batch)
                if len(pending) >= config.chunk_images:
                    cache.write_part(directory, pa.Table.from_pylist(pending, schema=CACHE_SCHEMA))
                    pending = []
                if on_batch is not None:
                    on_batch(n_done)
        finally:
            if pending:  # finished items survive an exception
                cache.write_part(directory, pa.Table.from_pylist(pending, schema=CACHE_SCHEMA))
        scoring_s = time.perf_counter() - scoring_started
        _compact(directory)

    cached = read_scores(directory)
    index = {
        key: k
        for k, key in enumerate(zip(cached.column("item_id").to_pylist(), cached.column("input_sha256").to_pylist()))
    }
    served = cached.take([index[(row["item_id"], row["input_sha256"])] for row in rows]).to_pylist()
    out = []
    for row in served:
        prob = option_probabilities(row["loglik"])
        out.append(
            {
                **{k: row[k] for k in SCORE_SCHEMA.names if k in row},
                "prob": [float(p) for p in prob],
                "choice": int(np.argmax(row["loglik"])),
            }
        )
    metadata = {
        "model": model_name,
        "revision": revision,
        "prompt_id": PROMPT_ID,
        "items": len(rows),
        "items_scored": len(todo),
        "items_from_cache": len(rows) - len(todo),
        "items_per_s": round(len(todo) / scoring_s, 3) if scoring_s > 0 else None,
        "device": device_name,
        "dtype": dtype_text,
        "model_load_s": round(load_s, 3),
        "scoring_s": round(scoring_s, 3),
        "cache_dir": str(directory),
        "data_sha256": table_sha256(items.select(list(ITEM_COLUMNS))),
        "config": json.dumps(asdict(config), sort_keys=True),
    }
    return pa.Table.from_pylist(out, schema=SCORE_SCHEMA), metadata
