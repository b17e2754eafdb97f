"""Linear probe over a frozen vision tower ("vision control", AuthEval spec 5.4).

Features of each image come from the frozen tower in batches (GPU when present) and are cached in
Parquet keyed by (model, image_id, SHA-256 of the image's bytes), so a replaced image file is extracted
again and only rows of the image's current bytes are served. The cache is the scorer's (models/cache.py):
a folder of part files, each written atomically under a name no other part has, so an interrupted extraction keeps
every finished batch, a rerun extracts only the missing images, and a new part never replaces an existing one (not
even after a part was deleted). A tower that outputs NaN or infinity is refused before anything of its
batch is cached.

The probe is one linear layer trained with torch on train features (seeded; epochs, lr, weight decay
and batch from `ProbeConfig`); after every epoch it is scored on validation and the epoch is chosen by
the spec's order (lowest ordinal MAE, then highest balanced accuracy, then highest macro-F1, then the
earlier epoch). The operational head thresholds s = p . RS with tau fitted on validation. Test
features are never passed to training: they meet only the locked probe (`ProbeFit.proposals`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from autheval.columns import schema
from autheval.proposals.slates import expected_risk_scores, threshold_heads
from models import cache
from models.level_metrics import best_by_spec_order, check_levels, level_metrics
from models.option_head import fit_tau, thresholded_proposals
from models.training_runs import TrainingRun, facts

PROBE_SEED = 20260710
N_LEVELS = 4
FEATURE_SCHEMA = schema("model image_id input_sha256 feature")


class ProbeConfig(BaseModel):
    """The study's probe settings (spec 5.4) as defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int = 80
    lr: float = 0.003
    weight_decay: float = 0.001
    batch_size: int = 1024
    seed: int = PROBE_SEED
    device: str | None = None  # None: CUDA when present, else CPU


# ---------------------------------------------------------------- feature cache


def image_sha256(path: str) -> str:
    """SHA-256 of an image file's bytes: the cache key's part that a replaced file changes."""
    from autheval.raw.phash import read_image_bytes

    return hashlib.sha256(read_image_bytes(path)).hexdigest()


def cached_features(cache_dir: str | Path, model_key: str, hashes: Mapping[str, str] | None = None) -> pa.Table:
    """The servable cached rows of one model: keyed by (model, image_id, input_sha256), the first row
    per key wins. With `hashes` (image_id -> SHA-256 of its bytes now), only rows whose hash is the
    image's own are served, at most one per image; rows written before the cache was keyed by the
    bytes (no input_sha256) are never served."""

    def servable(_, table: pa.Table) -> np.ndarray:
        return np.asarray(pc.and_(pc.equal(table.column("model"), model_key), table.column("input_sha256").is_valid()))

    _, table, _ = cache.read_directory(cache_dir, FEATURE_SCHEMA, servable)
    accept = None if hashes is None else (lambda key: hashes.get(key[0]) == key[1])
    return cache.first_per_key(table, ("image_id", "input_sha256"), accept)


def extract_features(
    tower,
    processor,
    image_ids: list[str],
    load_image,
    cache_dir: str | Path,
    model_key: str,
    batch_size: int = 64,
    device: str | None = None,
    progress=None,
    *,
    hashes: Mapping[str, str],
) -> pa.Table:
    """Pooled features of the frozen `tower` for `image_ids`, through the resumable Parquet cache.

    `load_image(image_id)` returns a PIL image; `hashes[image_id]` is the SHA-256 of its bytes (the
    cache key with the model and the id, so a replaced file is extracted again); `processor` turns a
    list of images into `pixel_values`; `tower` is a vision model whose output has `pooler_output`
    (CLIPVisionModel, SigLIP) or `image_embeds`. Only images missing from the cache under their hash
    are run; each finished batch is one part file. Returns the cached rows of `image_ids`, in order."""
    import torch

    from models.device import choose_device

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    done = set(cached_features(cache_dir, model_key, hashes).column("image_id").to_pylist())
    todo = [i for i in image_ids if i not in done]
    _report_changed(cache_dir, model_key, todo)
    dev = choose_device(device)
    tower = tower.to(dev).eval()
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        pixels = processor(images=[load_image(i) for i in batch], return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            out = tower(pixel_values=pixels.to(dev, dtype=next(tower.parameters()).dtype))
        pooled = getattr(out, "image_embeds", None)
        if pooled is None:
            pooled = out.pooler_output
        features = pooled.float().cpu().numpy()
        bad = ~np.isfinite(features).all(axis=1)
        if bad.any():
            first = batch[int(np.flatnonzero(bad)[0])]
            raise ValueError(
                f"vision tower {model_key} gave non-finite features for image {first!r} "
                f"({int(bad.sum())} of {len(batch)} images in the batch); none of the batch is cached"
            )
        part = pa.table(
            {
                "model": [model_key] * len(batch),
                "image_id": batch,
                "input_sha256": [hashes[i] for i in batch],
                "feature": pa.array(list(features), pa.list_(pa.float32())),
            },
            schema=FEATURE_SCHEMA,
        )
        cache.write_part(cache_dir, part)
        if progress:
            progress(len(batch))
    return _in_order(cached_features(cache_dir, model_key, hashes), image_ids)


def _in_order(cached: pa.Table, image_ids: list[str]) -> pa.Table:
    index = {image_id: k for k, image_id in enumerate(cached.column("image_id").to_pylist())}
    return cached.take(pa.array([index[i] for i in image_ids], pa.int64()))


def _report_changed(cache_dir: Path, model_key: str, todo: list[str]) -> None:
    """Say how many images are extracted again because their bytes changed (their old rows stay, unserved)."""
    stale = set(cached_features(cache_dir, model_key).column("image_id").to_pylist()) & set(todo) if todo else set()
    if stale:
        from autheval.records.warnings import warn

        warn(
            f"probe cache {cache_dir}: {len(stale)} image(s) changed since their features were cached "
            "(other bytes); extracted again"
        )


def feature_matrix(features: pa.Table) -> np.ndarray:
    """The `feature` list column as a float32 matrix (n, d)."""
    column = features.column("feature").combine_chunks()
    return np.asarray(column.values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(len(column), -1)


# ---------------------------------------------------------------- training


def _seed_everything(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _probabilities(layer, x) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return torch.softmax(layer(x), dim=1).double().cpu().numpy()


@dataclass
class ProbeFit:
    """A locked probe: the chosen epoch's linear layer and the validation-fitted tau."""

    weight: np.ndarray  # (4, d)
    bias: np.ndarray  # (4,)
    tau: np.ndarray  # (3,)
    chosen_epoch: int
    epoch_table: list[dict]
    validation_metrics: dict
    validation_head_mae: float
    data_sha256: str
    config: ProbeConfig

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        logits = np.asarray(features, dtype=np.float64) @ self.weight.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def heads(self, features: np.ndarray) -> np.ndarray:
        """The operational head: #(tau < p . RS) (not the argmax, spec 9.4)."""
        return threshold_heads(expected_risk_scores(self.probabilities(features)), self.tau)

    def proposals(self, image_ids, features: np.ndarray, mechanism: str = "CLIP probe", **options) -> pa.Table:
        """The locked probe's proposals, by the option head's rule (thresholded_proposals; `options`: source,
        `model` (the tower), named if they break a proposals rule)."""
        return thresholded_proposals(mechanism, image_ids, self.probabilities(features), self.tau, **options)

    def training_run(self) -> TrainingRun:
        """The fit's rows of `model_runs`: the epoch table (step = epoch) and, at the chosen epoch, tau
        and the thresholded head's validation MAE (step_kind `lock`)."""
        locked = {
            "epoch": self.chosen_epoch,
            **{f"tau_{k}": float(t) for k, t in enumerate(self.tau, 1)},
            "validation_head_mae": self.validation_head_mae,
        }
        return TrainingRun(
            "probe",
            self.data_sha256,
            self.config.model_dump(),
            self.config.seed,
            facts("epoch", self.epoch_table, "epoch", chosen=self.chosen_epoch)
            + facts("lock", [locked], "epoch", chosen=True),
        )

    def metadata(self) -> dict:
        return {
            "chosen_epoch": self.chosen_epoch,
            "epoch_table": self.epoch_table,
            "validation_metrics": self.validation_metrics,
            "tau": self.tau.tolist(),
            "validation_head_mae": self.validation_head_mae,
            "data_sha256": self.data_sha256,
            "config": self.config.model_dump(),
        }


def _hash_arrays(*arrays) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(b"\x1e")
    return digest.hexdigest()


def train_probe(
    train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray, config: ProbeConfig | None = None
) -> ProbeFit:
    """Train the linear probe on train, choose the epoch on validation by the spec's order, fit tau on
    validation. Deterministic for a seed on CPU."""
    import torch

    from models.device import choose_device

    config = config or ProbeConfig()
    generator = _seed_everything(config.seed)
    device = choose_device(config.device)
    x = torch.as_tensor(np.asarray(train_x, dtype=np.float32))
    train_y, val_y = check_levels(train_y, "probe train labels"), check_levels(val_y, "probe validation labels")
    y = torch.as_tensor(train_y)
    vx = torch.as_tensor(np.asarray(val_x, dtype=np.float32)).to(device)
    layer = torch.nn.Linear(x.shape[1], N_LEVELS).to(device)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    epoch_table, states = [], {}
    for epoch in range(1, config.epochs + 1):
        layer.train()
        order = torch.randperm(x.shape[0], generator=generator)
        total = 0.0
        for start in range(0, x.shape[0], config.batch_size):
            idx = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(layer(x[idx].to(device)), y[idx].to(device))
            loss.backward()
            optimizer.step()
            total += loss.item() * idx.numel()
        layer.eval()
        predicted = _probabilities(layer, vx).argmax(axis=1)
        epoch_table.append({"epoch": epoch, "train_loss": total / x.shape[0], **level_metrics(predicted, val_y)})
        states[epoch] = (
            layer.weight.detach().double().cpu().numpy().copy(),
            layer.bias.detach().double().cpu().numpy().copy(),
        )
    best = best_by_spec_order(epoch_table, tie_key="epoch")
    weight, bias = states[best["epoch"]]
    fit = ProbeFit(
        weight,
        bias,
        np.zeros(3),
        best["epoch"],
        epoch_table,
        {k: best[k] for k in ("mae", "balanced_accuracy", "macro_f1", "accuracy")},
        float("nan"),
        _hash_arrays(
            np.asarray(train_x, np.float32), np.asarray(train_y, np.int64), np.asarray(val_x, np.float32), val_y
        ),
        config,
    )
    tau, head_mae = fit_tau(expected_risk_scores(fit.probabilities(val_x)), val_y)
    fit.tau, fit.validation_head_mae = tau, head_mae
    return fit


def train_probe_from_tables(features: pa.Table, labels: pa.Table, config: ProbeConfig | None = None) -> ProbeFit:
    """The asset's one call: `features` (image_id, feature) from the cache, `labels` (image_id, split,
    ideal_action_level). Only train and val rows are read; test rows are dropped here."""
    level = dict(zip(labels.column("image_id").to_pylist(), labels.column("ideal_action_level").to_pylist()))
    split = dict(zip(labels.column("image_id").to_pylist(), labels.column("split").to_pylist()))
    ids = features.column("image_id").to_pylist()
    matrix = feature_matrix(features)
    rows = {
        s: [k for k, i in enumerate(ids) if split.get(i) == s and level.get(i) is not None] for s in ("train", "val")
    }
    if not rows["train"] or not rows["val"]:
        raise ValueError("the probe needs labelled train and val images")
    return train_probe(
        matrix[rows["train"]],
        np.asarray([level[ids[k]] for k in rows["train"]]),
        matrix[rows["val"]],
        np.asarray([level[ids[k]] for k in rows["val"]]),
        config,
    )


# ---------------------------------------------------------------- the lake's calls


def load_vision_tower(model_dir: str | Path):
    """(tower, image processor) of a local vision model directory (CLIPVisionModel, SigLIP vision, ...)."""
    from transformers import AutoImageProcessor, AutoModel

    from models.device import quiet_transformers
    from models.model_dir import check_model_dir

    check_model_dir(model_dir, "vision tower", "vision")  # one line, not a loader's traceback
    quiet_transformers()
    tower = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    return tower, AutoImageProcessor.from_pretrained(model_dir, local_files_only=True)


def tower_features(
    images: pa.Table, model_dir: str | Path, cache_dir: str | Path, batch_size: int = 64, device: str | None = None
) -> tuple[pa.Table, dict]:
    """The features asset's one call: `images` (image_id, image_path) through the frozen tower at
    `model_dir`, cached under `cache_dir/<model key>` (model name + content hash, so another tower or
    other weights never reuse these rows) and by each image's bytes (read and hashed every run, as the
    scorer does). The tower loads only when an image is left to extract.
    Returns the feature rows of `images` in their order and the run's metadata."""
    import time

    from autheval.io import table_sha256
    from models.scorer import directory_sha256
    from models.scorer_batches import open_rgb

    revision = directory_sha256(model_dir)
    model_key = f"{Path(model_dir).name}@{revision[:16]}"
    folder = cache.key_directory(cache_dir, model_key)
    ids = [str(i) for i in images.column("image_id").to_pylist()]
    path_of = dict(zip(ids, images.column("image_path").to_pylist()))
    hashes = {i: image_sha256(path_of[i]) for i in ids}
    missing = len(set(ids) - set(cached_features(folder, model_key, hashes).column("image_id").to_pylist()))
    started = time.perf_counter()
    device_name = None
    if missing:
        tower, processor = load_vision_tower(model_dir)
        from models.device import choose_device

        device_name = str(choose_device(device))
        features = extract_features(
            tower,
            processor,
            ids,
            lambda i: open_rgb(path_of[i]),
            folder,
            model_key,
            batch_size=batch_size,
            device=device,
            hashes=hashes,
        )
    else:
        features = _in_order(cached_features(folder, model_key, hashes), ids)
    seconds = time.perf_counter() - started
    return features, {
        "model": Path(model_dir).name,
        "revision": revision,
        "model_key": model_key,
        "images": len(ids),
        "images_extracted": missing,
        "images_from_cache": len(ids) - missing,
        "device": device_name,
        "images_per_s": round(missing / seconds, 3) if missing and seconds > 0 else None,
        "seconds": round(seconds, 3),
        "feature_dim": int(feature_matrix(features).shape[1]) if features.num_rows else None,
        "cache_dir": str(folder),
        "data_sha256": table_sha256(pa.table({"image_id": ids, "input_sha256": [hashes[i] for i in ids]})),
    }
