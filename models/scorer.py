"""VLM likelihood scorer (AuthEval spec 5.1): the mean token log-likelihood of each of the four risk
continuations given the image and the public metadata, softmax-ed into p_very_low..p_high.

Why it is not the reference's loop (one image per forward pass, four padded rows): here a batch of
images runs the shared prompt once (`use_cache=True`), the key/value cache is repeated four times in the
batch dimension, and the four continuations of every image run in one second pass on that cache. The
prompt (about 400 tokens with 256 image tokens on MedGemma) is computed once instead of four times and
only the last prompt position is projected onto the vocabulary. The prompt pass is left-padded, so
every row keeps its real distances, which Gemma3's sliding-window layers need when one prompt of the
batch is longer than the window (a long free-text metadata value). `method="padded_rows"` is the
reference's scheme (prompt + continuation rows, right-padded), batched over images, projecting only the
positions it scores; it is the fallback for a model whose cache cannot be repeated. `method="reference"`
is the same with every position's logits, as the reference computes them: at batch size 1 it is the
benchmark's baseline.

Results go to a resumable Parquet cache keyed by (model, revision, prompt id, image id, input hash):
one part file per chunk, each written atomically, so an interrupted run loses no finished row and a
rerun scores only the images not yet in the cache. The input hash is the SHA-256 of the prompt text
and the image bytes, i.e. of everything that reaches the model: a corrected age or a replaced image
file is rescored instead of reusing the old row. A row is served only when its key matches the
request; a row of another model or prompt found in a key's folder is reported and skipped.

Where the parts are: the two forward passes (shared prefix, padded rows) in models/scorer_passes.py,
the batches (decoding, the processor, the prefetch thread, the oracle pass) in models/scorer_batches.py,
the part files and their keys in models/cache.py (the probe's feature cache is the same module);
here the model, its revision, the inputs, the scorer's key checks and the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from autheval.columns import schema
from autheval.proposals.slates import proposals_table, ranked_slates
from autheval.vocabulary import RISK_LEVELS, RISK_SCORES
from models import cache
from models.prompts import (
    BACKEND,
    CONTINUATIONS,
    MAX_METADATA_CHARS,
    PROMPT_ID,
    PUBLIC_COLUMNS,
    metadata_value,
    risk_prompt,
)
from models.scorer_batches import METHODS, continuation_token_ids, score_rows

KEY_COLUMNS = ("model", "revision", "prompt_id", "image_id", "input_sha256")
CACHE_SCHEMA = schema(
    *KEY_COLUMNS,
    *[(f"ll_{level}", pa.float64()) for level in RISK_LEVELS],
    *[(f"n_tokens_{level}", pa.int32()) for level in RISK_LEVELS],
    *[(f"p_{level}", pa.float64()) for level in RISK_LEVELS],
    "s_assistant backend method device dtype scored_at",
)


@dataclass(frozen=True)
class ScorerConfig:
    """A model is a local directory (nothing is downloaded); an optional LoRA adapter directory on top
    makes a fine-tuned model its own mechanism. `revision` defaults to a content hash of the files."""

    model_dir: str
    adapter_dir: str | None = None
    model_name: str | None = None  # default: the directory name (+ "+" adapter directory name)
    revision: str | None = None  # default: sha256 of the model (and adapter) files
    batch_size: int = 8
    chunk_images: int = 64  # images per cache part file (a crash loses at most one unflushed chunk)
    method: str = "shared_prefix"
    device: str | None = None  # default: cuda when present, else cpu
    prompt_id: str = PROMPT_ID  # a declared prompt variant (models/prompts.py); the default is the spec's

    def __post_init__(self):
        # a Path is kept as its text (the run's metadata is JSON); a count below 1 is refused here, not
        # after the model has loaded (batch_size=-1 scored nothing and reported success)
        for name in ("model_dir", "adapter_dir"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
        if not isinstance(self.model_dir, str) or not self.model_dir:
            raise ValueError(f"ScorerConfig.model_dir must be a folder's path, got {self.model_dir!r}")
        for name in ("batch_size", "chunk_images"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ScorerConfig.{name} must be a positive integer, got {value!r}")
        if self.method not in METHODS:
            raise ValueError(f"ScorerConfig.method: unknown scoring method {self.method!r}; expected one of {METHODS}")

    def name(self) -> str:
        if self.model_name:
            return self.model_name
        base = Path(self.model_dir).name
        return f"{base}+{Path(self.adapter_dir).name}" if self.adapter_dir else base


# ---------------------------------------------------------------- model identity and loading


_DIRECTORY_HASHES: dict[tuple, str] = {}


def directory_sha256(path: str | Path) -> str:
    """Content hash of a model directory: relative names and bytes of every file, in sorted order.
    Remembered for the process while no file's name, size or mtime changes (a real model is GBs, and
    the revision, the adapter's base check and each prompt variant ask for it)."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    signature = (
        str(root.resolve()),
        tuple((f.relative_to(root).as_posix(), f.stat().st_size, f.stat().st_mtime_ns) for f in files),
    )
    if signature in _DIRECTORY_HASHES:
        return _DIRECTORY_HASHES[signature]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    _DIRECTORY_HASHES[signature] = digest.hexdigest()
    return _DIRECTORY_HASHES[signature]


def model_revision(config: ScorerConfig) -> str:
    if config.revision:
        return config.revision
    revision = directory_sha256(config.model_dir)
    if config.adapter_dir:
        revision = hashlib.sha256(f"{revision}+{directory_sha256(config.adapter_dir)}".encode()).hexdigest()
    return revision


def check_adapter_base(model_dir: str | Path, adapter_dir: str | Path) -> None:
    """Refuse a LoRA adapter trained on another base model: peft applies it to any model with the same
    module names, silently. Our fine-tune records the base's content hash (finetune_metadata.json); an
    adapter made elsewhere is checked by the base its adapter_config names (the same directory, or a
    hub id whose last part is this directory's name)."""
    from autheval.errors import RecordError

    adapter = Path(adapter_dir)
    metadata = adapter / "finetune_metadata.json"
    recorded = json.loads(metadata.read_text()).get("base_sha256") if metadata.exists() else None
    if recorded:
        if recorded != directory_sha256(model_dir):
            raise RecordError(
                str(adapter),
                None,
                f"this LoRA adapter was trained on another base model (content "
                f"hash {recorded[:16]}), not on {model_dir}",
            )
        return
    config_file = adapter / "adapter_config.json"
    named = json.loads(config_file.read_text()).get("base_model_name_or_path") if config_file.exists() else None
    if not named:
        return
    same = (
        Path(named).resolve() == Path(model_dir).resolve()
        if Path(named).is_dir()
        else Path(named).name == Path(model_dir).resolve().name
    )
    if not same:
        raise RecordError(
            str(config_file), "base_model_name_or_path", f"the adapter names base model {named!r}, not {model_dir}"
        )


def load_model(model_dir: str, adapter_dir: str | None = None, device=None):
    """(model, processor, device, dtype) from local directories only; a LoRA adapter is merged in, once
    its base is checked to be this model."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from models.device import choose_device, dtype_for, quiet_transformers
    from models.model_dir import check_model_dir

    check_model_dir(model_dir, "scorer model", "scorer")  # one line, not a loader's traceback
    quiet_transformers()
    device = choose_device(device)
    dtype = dtype_for(device)
    processor = AutoProcessor.from_pretrained(model_dir, backend="pil", local_files_only=True)  # = use_fast=False
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
    if adapter_dir:
        check_adapter_base(model_dir, adapter_dir)
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir, local_files_only=True).merge_and_unload()
    model.to(device).eval()
    return model, processor, device, dtype


def probabilities(loglik: np.ndarray) -> np.ndarray:
    """softmax over the four mean log-likelihoods in float64 (spec 5.1 step 4); no clipping here (the
    readout clips at 1e-8 when it takes logs)."""
    loglik = np.asarray(loglik, dtype=np.float64)
    shifted = np.exp(loglik - loglik.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------- inputs


def public_inputs(images: pa.Table) -> pa.Table:
    """The lake's `images` table reduced to what a proposer may see (`path` becomes `image_path`)."""
    if "image_path" not in images.column_names and "path" in images.column_names:
        images = images.rename_columns(["image_path" if c == "path" else c for c in images.column_names])
    return images.select([c for c in PUBLIC_COLUMNS if c in images.column_names])


def check_inputs(images: pa.Table) -> None:
    from autheval.errors import RecordError

    forbidden = [c for c in images.column_names if c not in PUBLIC_COLUMNS]
    if forbidden:
        raise RecordError(
            "scorer input",
            forbidden[0],
            f"only public fields reach the proposer ({', '.join(PUBLIC_COLUMNS)}); select them with public_inputs()",
        )
    for column in ("image_id", "image_path"):
        if column not in images.column_names:
            raise RecordError("scorer input", column, "required column is missing")
    ids = images.column("image_id").to_pylist()
    if len(set(ids)) != len(ids):
        raise RecordError("scorer input", "image_id", "image ids must be unique")
    for column in ("age", "sex", "anatomic_site"):  # what reaches the prompt, bounded
        if column not in images.column_names:
            continue
        for row, value in enumerate(images.column(column).to_pylist()):
            if value is not None and len(metadata_value(value)) > MAX_METADATA_CHARS:
                raise RecordError(
                    "scorer input",
                    column,
                    f"a metadata value in the prompt must be at most {MAX_METADATA_CHARS} characters "
                    "(a model's memory grows with the square of the prompt)",
                    f"row {row + 1}, image {ids[row]!r}: {len(metadata_value(value))} characters",
                )


def input_sha256(prompt: str, image_path: str) -> str:
    """SHA-256 of what reaches the model for one image: the prompt text and the image file's bytes."""
    from autheval.raw.phash import read_image_bytes

    digest = hashlib.sha256(prompt.encode("utf-8"))
    digest.update(b"\0")
    digest.update(read_image_bytes(image_path))
    return digest.hexdigest()


# ---------------------------------------------------------------- the resumable cache


def key_directory(cache_dir: str | Path, model: str, revision: str, prompt_id: str) -> Path:
    return cache.key_directory(cache_dir, model, revision, prompt_id)


def _part_rows(part: Path, table: pa.Table) -> np.ndarray:
    """Which rows of a part are served: those whose (model, revision, prompt id) is its folder's key
    and that carry an input hash."""
    return _ours(part, table) & np.asarray(table.column("input_sha256").is_valid())


def _ours(part: Path, table: pa.Table) -> np.ndarray:
    triples = list(zip(*(table.column(c).to_pylist() for c in ("model", "revision", "prompt_id"))))
    tags = {t: cache.key_tag(*t) for t in set(triples)}
    return np.fromiter((tags[t] == part.parent.name for t in triples), dtype=bool, count=len(triples))


def _read_parts(directory: Path, pattern: str = cache.PART_GLOB) -> tuple[pa.Table, int, int]:
    """The servable rows of the parts under `directory` (`pattern`), one per key (the first part by
    name wins), and the counts of foreign rows and of rows written before inputs were hashed."""
    parts, table, read = cache.read_directory(directory, CACHE_SCHEMA, _part_rows, pattern)
    foreign = unhashed = 0
    for part, rows in zip(parts, read):
        ours = _ours(part, rows)
        foreign += int((~ours).sum())
        unhashed += int((ours & ~np.asarray(rows.column("input_sha256").is_valid())).sum())
    return cache.first_per_key(table, KEY_COLUMNS), foreign, unhashed


def _report_skipped(where: Path, foreign: int, unhashed: int) -> None:
    from autheval.records.warnings import warn

    if foreign:
        warn(
            f"scorer cache {where}: skipped {foreign} row(s) of another model, revision or prompt id than "
            "their folder's key; they are not served as this key's scores"
        )
    if unhashed:
        warn(
            f"scorer cache {where}: skipped {unhashed} row(s) written without an input hash (before the "
            "prompt text and image bytes keyed the cache); those images are scored again"
        )


def read_cache(
    cache_dir: str | Path, model: str | None = None, revision: str | None = None, prompt_id: str | None = None
) -> pa.Table:
    """Every servable row under `cache_dir` (or of one key), one row per key (first part wins). Rows
    whose key is not their folder's, or without an input hash, are skipped with a warning."""
    root = Path(cache_dir)
    where = key_directory(root, model, revision, prompt_id) if model is not None else root
    table, foreign, unhashed = _read_parts(where, cache.PART_GLOB if model is not None else f"*/{cache.PART_GLOB}")
    _report_skipped(where, foreign, unhashed)
    return table


def write_part(directory: Path, rows: list[dict]) -> Path:
    """One chunk of finished rows as its own part file (models/cache.py)."""
    return cache.write_part(directory, pa.Table.from_pylist(rows, schema=CACHE_SCHEMA))


def compact(directory: Path) -> int:
    """Merge a key's part files into one (after a run), so the cache does not grow a file per chunk.
    A part holding a row of another key is left as it is (not ours to merge or delete); rows without an
    input hash are dropped (never served: their images were scored again). The merged file lands
    before the old parts go: a crash in between leaves duplicates, which read_cache drops. Returns the
    number of parts left. One process merges a key at a time (models/cache.py compaction_lock): while
    another merges, this one leaves the parts as they are."""
    with cache.compaction_lock(directory) as mine:
        if not mine:
            return len(cache.part_paths(directory))
        parts, _, read = cache.read_directory(directory, CACHE_SCHEMA)
        mergeable = [(part, table) for part, table in zip(parts, read) if _ours(part, table).all()]
        if len(mergeable) <= 1 and all(_part_rows(part, table).all() for part, table in mergeable):
            return len(parts)
        kept = [table.filter(pa.array(_part_rows(part, table))) for part, table in mergeable]
        merged = cache.first_per_key(pa.concat_tables(kept), KEY_COLUMNS)
        if merged.num_rows:
            cache.write_part(directory, merged)
        cache.remove_parts([part for part, _ in mergeable])
        return len(parts) - len(mergeable) + (1 if merged.num_rows else 0)


# ---------------------------------------------------------------- the run


def score_images(
    images: pa.Table,
    config: ScorerConfig,
    cache_dir: str | Path,
    *,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
    load: Callable[[], tuple] | None = None,
) -> tuple[pa.Table, dict]:
    """Score every image of `images` (public columns only) not yet in the cache with the same input
    (prompt text and image bytes, `input_sha256`); return the cache rows of these images in input order
    and the run's metadata (images/s, device, data hash, config).

    `on_batch(n_done)` is called after each scored batch (a hook for progress reporting and for tests
    that interrupt a run). `load()` gives (model, processor, device, dtype) when the caller already
    holds the model (several prompt variants, one load); by default the model is loaded here, and only
    when an image is left to score."""
    from autheval.io import table_sha256

    check_inputs(images)
    if config.method not in METHODS:
        raise ValueError(f"unknown scoring method {config.method!r}; expected one of {METHODS}")
    risk_prompt(None, None, None, config.prompt_id)  # an undeclared prompt id fails before the model loads
    model_name, revision = config.name(), model_revision(config)
    directory = key_directory(cache_dir, model_name, revision, config.prompt_id)
    rows = [{**row, "prompt_id": config.prompt_id} for row in images.to_pylist()]
    for row in rows:
        row["input_sha256"] = input_sha256(
            risk_prompt(row.get("age"), row.get("sex"), row.get("anatomic_site"), config.prompt_id), row["image_path"]
        )
    cached, foreign, unhashed = _read_parts(directory)
    _report_skipped(directory, foreign, unhashed)
    done = set(zip(cached.column("image_id").to_pylist(), cached.column("input_sha256").to_pylist()))
    todo = [row for row in rows if (row["image_id"], row["input_sha256"]) not in done]
    changed = len({row["image_id"] for row in todo} & set(cached.column("image_id").to_pylist()))

    started = time.perf_counter()
    device_name, dtype_name_, load_s, scoring_s, parts = None, None, 0.0, 0.0, 0
    if todo:
        from models.device import dtype_name

        model, processor, device, dtype = (
            load() if load is not None else load_model(config.model_dir, config.adapter_dir, config.device)
        )
        device_name, dtype_name_ = str(device), dtype_name(dtype)
        load_s = time.perf_counter() - started
        n_tokens = [len(ids) for ids in continuation_token_ids(processor)]
        scoring_started = time.perf_counter()
        pending: list[dict] = []
        bar = _progress(len(todo), f"scoring {model_name}", enabled=progress)
        try:
            done_now = 0
            for batch, loglik in score_rows(model, processor, todo, config.batch_size, config.method):
                pending.extend(
                    _cache_rows(batch, loglik, n_tokens, model_name, revision, config, device_name, dtype_name_)
                )
                done_now += len(batch)
                bar.advance(len(batch))
                if len(pending) >= config.chunk_images:
                    write_part(directory, pending)
                    parts += 1
                    pending = []
                if on_batch is not None:
                    on_batch(done_now)
        finally:
            if pending:  # finished rows survive an exception
                write_part(directory, pending)
                parts += 1
            bar.close()
        scoring_s = time.perf_counter() - scoring_started
        compact(directory)

    cached = _read_parts(directory)[0]
    index = {
        key: k
        for k, key in enumerate(zip(cached.column("image_id").to_pylist(), cached.column("input_sha256").to_pylist()))
    }
    result = cached.take([index[(row["image_id"], row["input_sha256"])] for row in rows])
    metadata = {
        "model": model_name,
        "revision": revision,
        "prompt_id": config.prompt_id,
        "images": images.num_rows,
        "images_scored": len(todo),
        "images_from_cache": images.num_rows - len(todo),
        "images_changed": changed,
        "cache_rows_skipped": foreign + unhashed,
        "images_per_s": round(len(todo) / scoring_s, 3) if scoring_s > 0 else None,
        "device": device_name,
        "dtype": dtype_name_,
        "model_load_s": round(load_s, 3),
        "scoring_s": round(scoring_s, 3),
        "parts_written": parts,
        "cache_dir": str(directory),
        "data_sha256": table_sha256(images),
        "config": json.dumps(asdict(config), sort_keys=True),
    }
    return result, metadata


def _cache_rows(
    batch: list[dict],
    loglik: np.ndarray,
    n_tokens: list[int],
    model: str,
    revision: str,
    config: ScorerConfig,
    device: str,
    dtype: str,
) -> list[dict]:
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    bad = ~np.isfinite(loglik).all(axis=1)
    if bad.any():  # a broken model must not leave rows to reuse
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"model {config.model_dir} gave non-finite log-likelihoods for image "
            f"{batch[k]['image_id']!r} ({np.asarray(loglik[k]).tolist()}); {int(bad.sum())} of "
            f"{len(batch)} images in the batch, none of the batch is cached"
        )
    probs = probabilities(loglik)
    rows = []
    for row, ll, p in zip(batch, loglik, probs):
        p_rounded = [round(float(x), 8) for x in p]  # the reference cache keeps 8 decimals
        record = {
            "model": model,
            "revision": revision,
            "prompt_id": config.prompt_id,
            "image_id": row["image_id"],
            "input_sha256": row["input_sha256"],
            "s_assistant": round(float(np.dot(p, RISK_SCORES)), 8),
            "backend": BACKEND,
            "method": config.method,
            "device": device,
            "dtype": dtype,
            "scored_at": now,
        }
        for k, level in enumerate(RISK_LEVELS):
            record[f"ll_{level}"] = float(ll[k])
            record[f"n_tokens_{level}"] = n_tokens[k]
            record[f"p_{level}"] = p_rounded[k]
        rows.append(record)
    return rows


class _Progress:
    """A rich progress bar on stderr (or nothing)."""

    def __init__(self, total: int, label: str, enabled: bool):
        self._bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("images"),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _progress(total: int, label: str, enabled: bool) -> _Progress:
    return _Progress(total, label, enabled)


def score_prompt_variants(
    images: pa.Table,
    config: ScorerConfig,
    cache_dir: str | Path,
    variants: int = 4,
    variant_image_ids=None,
    *,
    progress: bool = True,
) -> tuple[pa.Table, dict]:
    """The scorer over K declared prompt variants (CCT, models/prompts.py PROMPT_VARIANTS): variant 0
    (the spec prompt) on every image of `images`, variants 1..K-1 on the images in `variant_image_ids`
    (default: every image). One model load for all variants, and only if something is left to score;
    each variant is its own cache key (its prompt id), so a rerun scores nothing already cached.

    Returns the cache rows with their `variant` (0..K-1), variant by variant, and the run's metadata
    summed over the variants (`images_scored` = image x variant pairs scored now)."""
    import dataclasses

    import pyarrow.compute as pc

    from autheval.io import table_sha256
    from models.prompts import variant_prompt_ids

    loaded: list[tuple] = []

    def load() -> tuple:
        if not loaded:
            loaded.append(load_model(config.model_dir, config.adapter_dir, config.device))
        return loaded[0]

    others = (
        images
        if variant_image_ids is None
        else images.filter(
            pc.is_in(images.column("image_id"), pa.array([str(i) for i in variant_image_ids], pa.string()))
        )
    )
    parts, runs = [], []
    for variant, prompt_id in enumerate(variant_prompt_ids(variants)):
        subset = images if variant == 0 else others
        scores, meta = score_images(
            subset, dataclasses.replace(config, prompt_id=prompt_id), cache_dir, progress=progress, load=load
        )
        parts.append(scores.append_column("variant", pa.array([variant] * scores.num_rows, pa.int32())))
        runs.append(meta)
    scored = sum(m["images_scored"] for m in runs)
    scoring_s = sum(m["scoring_s"] for m in runs)
    device = next((m["device"] for m in runs if m["device"]), None)
    metadata = {
        "model": runs[0]["model"],
        "revision": runs[0]["revision"],
        "variants": variants,
        "prompt_ids": [m["prompt_id"] for m in runs],
        "images": images.num_rows,
        "images_all_variants": others.num_rows,
        "scorings": sum(m["images"] for m in runs),
        "images_scored": scored,
        "images_from_cache": sum(m["images_from_cache"] for m in runs),
        "images_changed": sum(m["images_changed"] for m in runs),
        "cache_rows_skipped": sum(m["cache_rows_skipped"] for m in runs),
        "images_per_s": round(scored / scoring_s, 3) if scoring_s > 0 else None,
        "device": device,
        "dtype": next((m["dtype"] for m in runs if m["dtype"]), None),
        "model_load_s": sum(m["model_load_s"] for m in runs),
        "scoring_s": round(scoring_s, 3),
        "cache_dir": str(cache_dir),
        "data_sha256": table_sha256(images),
        "config": json.dumps({**asdict(config), "prompt_id": None, "variants": variants}, sort_keys=True),
    }
    return pa.concat_tables(parts), metadata


# ---------------------------------------------------------------- proposals


def proposals_from_scores(
    scores: pa.Table, mechanism: str, source: str = "model", model: str | None = None
) -> pa.Table:
    """The `proposals` contract from scorer rows, the slate ranking the four actions by probability
    (ties to the lower action; autheval/proposals/slates.py). The MedGemma readout instead ranks by its locked class
    scores (models/readout.py). `model` is named if they break a proposals rule."""
    p = (
        np.column_stack([scores.column(f"p_{level}").to_numpy() for level in RISK_LEVELS])
        if scores.num_rows
        else np.zeros((0, len(RISK_LEVELS)))
    )
    return proposals_table(mechanism, scores.column("image_id").to_pylist(), ranked_slates(p), p, source, model)


def continuation_loglik(scores: pa.Table) -> pa.Table:
    """Scorer rows in long form: one row per (image, continuation) with its mean token log-likelihood."""
    n = scores.num_rows
    return pa.table(
        {
            "model": [m for m in scores.column("model").to_pylist() for _ in RISK_LEVELS],
            "image_id": [i for i in scores.column("image_id").to_pylist() for _ in RISK_LEVELS],
            "level": list(RISK_LEVELS) * n,
            "continuation": [CONTINUATIONS[level].lstrip(" ") for level in RISK_LEVELS] * n,
            "loglik_mean": [
                x for row in zip(*(scores.column(f"ll_{lv}").to_pylist() for lv in RISK_LEVELS)) for x in row
            ],
        }
    )
