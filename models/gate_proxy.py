"""Gate proxy (AuthEval spec 2): the decision-time public risk context of an image, from its public
metadata only (age, sex, anatomic site), as a class-balanced multi-output ridge fitted on the train
split, with alpha and temperature selected on validation and the score applied to every split.

Plain numpy, no Dagster: the lake's `gate_proxy` asset calls `fit_gate_proxy` and writes its tables.
The diagnosis, reference state and every other label are never features: `FEATURE_INPUTS` is all the
model reads besides the target on train and validation rows.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from autheval.vocabulary import RISK_SCORES
from models.training_runs import TrainingRun, config_json, facts

BIN_THRESHOLDS = (0.25, 0.50, 0.75)  # level = #thresholds strictly below s_gate
ALPHAS = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)
TEMPERATURES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
N_LEVELS = 4
MISSING, OTHER = "__missing__", "__other__"
FEATURE_INPUTS = ("age", "sex", "anatomic_site")
SELECTION_METRIC = "ordinal_mae_then_multiclass_brier_then_balanced_accuracy"
PROXY_SOURCE = "train_fitted_public_metadata_model"
MODEL_TYPE = "class_balanced_multiclass_ridge"
# The fit's declared settings, named in every row of `gate_proxy_selection` (and so of `model_runs`).
CONFIG = {
    "model_type": MODEL_TYPE,
    "alphas": list(ALPHAS),
    "temperatures": list(TEMPERATURES),
    "selection_metric": SELECTION_METRIC,
    "feature_inputs": list(FEATURE_INPUTS),
    "bin_thresholds": list(BIN_THRESHOLDS),
    "risk_scores": list(RISK_SCORES),
}
RECORD_COLUMNS = ("selected", "data_sha256", "config")  # gate_proxy_selection columns that are not metrics


def normalise_category(values) -> list[str]:
    """Sex and site as the proxy sees them: trimmed, lower-case; null, '', 'nan', 'none' -> missing."""
    out = []
    for v in values:
        text = MISSING if v is None else str(v).strip().lower()
        out.append(MISSING if text in ("", "nan", "none") else text)
    return out


@dataclass(frozen=True)
class FeatureSchema:
    """The design matrix's columns, fixed by the train split (spec 2, in this order)."""

    age_mean: float
    age_scale: float
    sex_levels: tuple[str, ...]
    site_levels: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return (
            ["intercept", "age_z", "age_missing", "sex_missing", "anatomic_site_missing"]
            + [f"sex={s}" for s in (*self.sex_levels, OTHER)]
            + [f"anatomic_site={s}" for s in (*self.site_levels, OTHER)]
        )

    @classmethod
    def from_train(cls, age: np.ndarray, sex: list[str], site: list[str]) -> FeatureSchema:
        known = age[np.isfinite(age)]
        mean, scale = (float(known.mean()), float(known.std())) if known.size else (0.0, 1.0)
        if not math.isfinite(scale) or scale < 1e-8:
            scale = 1.0
        return cls(mean, scale, tuple(sorted(set(sex) - {MISSING})), tuple(sorted(set(site) - {MISSING})))

    def design(self, age: np.ndarray, sex: list[str], site: list[str]) -> np.ndarray:
        n = len(age)
        missing_age = ~np.isfinite(age)
        filled = np.where(missing_age, self.age_mean, age)
        x = np.zeros((n, len(self.columns)))
        x[:, 0] = 1.0
        x[:, 1] = filled / self.age_scale - self.age_mean / self.age_scale  # written as the reference does
        x[:, 2] = missing_age
        x[:, 3] = [s == MISSING for s in sex]
        x[:, 4] = [s == MISSING for s in site]
        offset = 5
        for values, levels in ((sex, self.sex_levels), (site, self.site_levels)):
            index = {level: i for i, level in enumerate(levels)}
            for row, value in enumerate(values):
                if value != MISSING:
                    x[row, offset + index.get(value, len(levels))] = 1.0
            offset += len(levels) + 1
        return x


def fit_ridge(x: np.ndarray, levels: np.ndarray, alpha: float) -> np.ndarray:
    """Class-balanced multi-output ridge: rows scaled by sqrt(N / (4 max(n_k, 1))), intercept unpenalised."""
    counts = np.bincount(levels, minlength=N_LEVELS)
    weights = len(levels) / (N_LEVELS * np.maximum(counts, 1))
    root = np.sqrt(weights[levels])[:, None]
    xt, yt = x * root, np.eye(N_LEVELS)[levels] * root
    penalty = np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    lhs, rhs = xt.T @ xt + alpha * penalty, xt.T @ yt
    try:
        return np.linalg.solve(lhs, rhs)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(lhs) @ rhs


def probabilities(x: np.ndarray, weights: np.ndarray, temperature: float) -> np.ndarray:
    logits = (x @ weights) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def binned_level(s_gate: np.ndarray) -> np.ndarray:
    return sum((s_gate > t).astype(np.int64) for t in BIN_THRESHOLDS)


def _balanced_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    recalls = [((pred == k) & (truth == k)).sum() / max((truth == k).sum(), 1) for k in range(N_LEVELS)]
    return float(np.mean(recalls))


def _macro_f1(pred: np.ndarray, truth: np.ndarray) -> float:
    scores = []
    for k in range(N_LEVELS):
        tp = ((pred == k) & (truth == k)).sum()
        denominator = (pred == k).sum() + (truth == k).sum()
        scores.append(2 * tp / denominator if denominator else 0.0)
    return float(np.mean(scores))


def _ece(probs: np.ndarray, truth: np.ndarray, bins: int = 10) -> float:
    confidence, pred = probs.max(axis=1), probs.argmax(axis=1)
    index = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.mean() * abs((pred[inside] == truth[inside]).mean() - confidence[inside].mean())
    return float(total)


def metrics(probs: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Selection metrics (binned score) and the reported extras (argmax-based with prefix argmax_)."""
    s_gate = probs @ np.asarray(RISK_SCORES)
    binned, argmax = binned_level(s_gate), probs.argmax(axis=1)
    out = {
        "ordinal_mae": float(np.abs(binned - truth).mean()),
        "brier": float(((probs - np.eye(N_LEVELS)[truth]) ** 2).sum(axis=1).mean()),
        "balanced_accuracy": _balanced_accuracy(binned, truth),
        "accuracy": float((binned == truth).mean()),
        "macro_f1": _macro_f1(binned, truth),
        "ece": _ece(probs, truth),
        "mean_s_gate": float(s_gate.mean()),
    }
    out.update(
        {
            "argmax_ordinal_mae": float(np.abs(argmax - truth).mean()),
            "argmax_balanced_accuracy": _balanced_accuracy(argmax, truth),
            "argmax_accuracy": float((argmax == truth).mean()),
            "argmax_macro_f1": _macro_f1(argmax, truth),
        }
    )
    return out


@dataclass
class GateProxy:
    """A fitted, selected proxy: its schema, weights and the tables the lake records."""

    schema: FeatureSchema
    weights: np.ndarray
    alpha: float
    temperature: float
    selection: pa.Table  # one row per (alpha, T) candidate with its validation metrics
    scores: pa.Table  # image_id, split, s_gate, gate_proxy, proxy_source
    data_sha256: str
    fit_sizes: dict = field(default_factory=dict)

    def metadata(self) -> dict:
        return {
            "model_type": MODEL_TYPE,
            "alpha": self.alpha,
            "temperature": self.temperature,
            "selection_metric": SELECTION_METRIC,
            "features": ", ".join(self.schema.columns),
            "data_sha256": self.data_sha256,
            "test_used_for_fitting_or_selection": False,
            **self.fit_sizes,
        }


def _inputs(images: pa.Table) -> tuple[np.ndarray, list[str], list[str]]:
    age = np.array([np.nan if v is None else float(v) for v in images.column("age").to_pylist()], dtype=float)
    return (
        age,
        normalise_category(images.column("sex").to_pylist()),
        normalise_category(images.column("anatomic_site").to_pylist()),
    )


def data_sha256(images: pa.Table) -> str:
    """SHA-256 over exactly what the proxy reads (ids, split, public metadata, train/val targets)."""
    digest = hashlib.sha256()
    columns = ["image_id", "split", *FEATURE_INPUTS, "ideal_action_level"]
    for row in zip(*(images.column(c).to_pylist() for c in columns)):
        digest.update(repr(row).encode())
    return digest.hexdigest()


def fit_gate_proxy(images: pa.Table) -> GateProxy:
    """Fit on train, select (alpha, T) on validation by (MAE, Brier, -balanced accuracy, alpha, T),
    score every split. `images` needs image_id, split, age, sex, anatomic_site, ideal_action_level
    (the target is read on train and validation rows only)."""
    split = np.array(images.column("split").to_pylist())
    train, val = split == "train", split == "val"
    if not train.any() or not val.any():
        raise ValueError("the gate proxy needs train and val rows (split column)")
    age, sex, site = _inputs(images)
    target = images.column("ideal_action_level").to_pylist()
    if any(target[i] is None for i in np.flatnonzero(train | val)):
        raise ValueError("ideal_action_level is missing on a train or val row")
    levels = np.array([-1 if t is None else int(t) for t in target])

    def pick(mask, values):
        return [v for v, m in zip(values, mask) if m]

    schema = FeatureSchema.from_train(age[train], pick(train, sex), pick(train, site))
    x = schema.design(age, sex, site)
    rows, best = [], None
    for alpha in ALPHAS:
        weights = fit_ridge(x[train], levels[train], alpha)
        for temperature in TEMPERATURES:
            m = metrics(probabilities(x[val], weights, temperature), levels[val])
            rows.append({"alpha": alpha, "temperature": temperature, **m})
            key = (m["ordinal_mae"], m["brier"], -m["balanced_accuracy"], alpha, temperature)
            if best is None or key < best[0]:
                best = (key, alpha, temperature, weights)
    _, alpha, temperature, weights = best
    digest = data_sha256(images)
    selection = pa.Table.from_pylist(rows).append_column(
        "selected", pa.array([r["alpha"] == alpha and r["temperature"] == temperature for r in rows])
    )
    selection = selection.append_column("data_sha256", pa.array([digest] * len(rows), pa.string())).append_column(
        "config", pa.array([config_json(CONFIG)] * len(rows), pa.string())
    )
    s_gate = probabilities(x, weights, temperature) @ np.asarray(RISK_SCORES)
    n = images.num_rows
    scores = pa.table(
        {
            "image_id": images.column("image_id"),
            "split": images.column("split"),
            "s_gate": pa.array(s_gate, pa.float64()),
            "gate_proxy": pa.array(["metadata"] * n),
            "proxy_source": pa.array([PROXY_SOURCE] * n),
        }
    )
    return GateProxy(
        schema,
        weights,
        alpha,
        temperature,
        selection,
        scores,
        digest,
        {"n_train": int(train.sum()), "n_val": int(val.sum()), "n_scored": n},
    )


def training_run(selection: pa.Table) -> TrainingRun | None:
    """`model_runs` facts from the `gate_proxy_selection` table (the 48 candidates are recorded once,
    there): step = candidate, its alpha, temperature and validation metrics; chosen = `selected`.
    None for a selection table without candidates (the source gave the scores)."""
    if not set(RECORD_COLUMNS) <= set(selection.column_names) or not selection.num_rows:
        return None
    rows = selection.to_pylist()
    chosen = next((k for k, row in enumerate(rows, 1) if row["selected"]), None)
    return TrainingRun(
        "gate_proxy",
        rows[0]["data_sha256"],
        rows[0]["config"],
        None,
        facts("candidate", rows, chosen=chosen, skip=RECORD_COLUMNS),
    )
