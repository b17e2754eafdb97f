"""The MedGemma action readout (AuthEval spec 5.2): a balanced multinomial logistic regression on the
clipped log probabilities of the four risk continuations, fitted on the validation design partition,
locked on the lock partition, then applied to test as a ranked slate under a bias policy.

Application needs only the lock (W, b): the published lock ships with the package
(`autheval/data/models/medgemma_readout_lock.json`). Training (`train_readout`) reproduces the fitting
procedure for a new score cache and returns its CV table, chosen C and lock metrics for the asset.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib.resources import files

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from autheval.errors import RecordError
from autheval.proposals.slates import policy_id, proposals_table, ranked_slates
from autheval.vocabulary import PROBABILITY_COLUMNS
from models.level_metrics import best_by_spec_order, check_levels, competence_metrics, level_metrics
from models.training_runs import TrainingRun, facts

READOUT_SEED = 20260711
CLIP_MIN = 1e-8
SUM_TOLERANCE = 1e-5
LOCK_FILE = "data/models/medgemma_readout_lock.json"


class ReadoutConfig(BaseModel):
    """The fitting procedure's declared constants (spec 5.2). design_fraction and the pilot image ids
    were not published [U]; 0.62 gives about the published 2,318 design / 1,417 lock images."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    c_grid: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0)
    n_splits: int = 4
    seed: int = READOUT_SEED
    design_fraction: float = 0.62
    pilot_image_ids: tuple[str, ...] = ()
    max_iter: int = 2000
    biases: tuple[float, ...] = (-0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6)


def readout_features(probabilities: np.ndarray, source: str = "probabilities") -> np.ndarray:
    """x = log(clip(p, 1e-8, 1)) after the spec's checks: finite, non-negative, rows summing to 1
    within 1e-5 (one line naming the first bad row otherwise)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != len(PROBABILITY_COLUMNS):
        raise RecordError(source, None, f"expected {len(PROBABILITY_COLUMNS)} probability columns, got shape {p.shape}")
    bad = ~np.isfinite(p).all(axis=1) | (p < 0).any(axis=1)
    bad |= np.abs(p.sum(axis=1) - 1.0) > SUM_TOLERANCE
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise RecordError(
            source,
            ", ".join(PROBABILITY_COLUMNS),
            "probabilities must be finite, non-negative and sum to 1 within 1e-5",
            f"row {row}: {p[row].tolist()}",
        )
    return np.log(np.clip(p, CLIP_MIN, 1.0))


@dataclass(frozen=True)
class ReadoutLock:
    """A locked readout: class scores z = x W^T + b over the four levels."""

    coef: np.ndarray  # (4 classes, 4 features)
    intercept: np.ndarray  # (4,)
    C: float | None = None
    seed: int = READOUT_SEED

    def class_scores(self, probabilities: np.ndarray) -> np.ndarray:
        return readout_features(probabilities) @ self.coef.T + self.intercept

    def slates(self, probabilities: np.ndarray, bias: float = 0.0, slate_size: int = 4) -> np.ndarray:
        """Ranked level indices under the bias policy (spec 5.2), shape (n, slate_size)."""
        return ranked_slates(self.class_scores(probabilities), bias=bias, slate_size=slate_size)

    def heads(self, probabilities: np.ndarray) -> np.ndarray:
        """The argmax class (bias 0), as the competence gate reads it."""
        return self.slates(probabilities, 0.0, 1)[:, 0]

    def as_dict(self) -> dict:
        return {"coef": self.coef.tolist(), "intercept": self.intercept.tolist(), "C": self.C, "seed": self.seed}


def published_lock() -> ReadoutLock:
    """The study's locked readout (spec 5.2 table; C = 0.01)."""
    data = json.loads(files("autheval").joinpath(LOCK_FILE).read_text(encoding="utf-8"))
    return ReadoutLock(
        np.array(data["coef"], dtype=np.float64),
        np.array(data["intercept"], dtype=np.float64),
        C=data["C"],
        seed=data["seed"],
    )


def published_lock_record() -> dict:
    """Everything the package embeds about the published lock (metrics included), for metadata."""
    return json.loads(files("autheval").joinpath(LOCK_FILE).read_text(encoding="utf-8"))


def readout_proposals(
    image_ids,
    probabilities: np.ndarray,
    lock: ReadoutLock | None = None,
    bias: float = 0.0,
    mechanism: str = "MedGemma readout",
    source: str = "model",
    model: str | None = None,
) -> pa.Table:
    """The readout as a proposal mechanism: full ranked slates under one bias policy, in the
    `proposals` contract (p_* are the scorer's probabilities)."""
    lock = lock or published_lock()
    return proposals_table(mechanism, image_ids, lock.slates(probabilities, bias, 4), probabilities, source, model)


def partition_order_key(cluster_id: str, seed: int = READOUT_SEED) -> str:
    return hashlib.sha256(f"{seed}|validation_partition|{cluster_id}".encode()).hexdigest()


def validation_partition(
    cluster_ids, image_ids=None, *, seed: int = READOUT_SEED, design_fraction: float = 0.62, pilot_image_ids=()
) -> np.ndarray:
    """Boolean mask of the design rows: whole clusters, ordered by the SHA-256 hex of
    "{seed}|validation_partition|{cluster_id}" (then the id); the clusters of pilot images are forced
    into design and the rest of the target max(#forced, round(#clusters * fraction)) is filled in order."""
    cluster_ids = np.asarray([str(c) for c in cluster_ids], dtype=object)
    clusters = sorted(set(cluster_ids.tolist()), key=lambda c: (partition_order_key(c, seed), c))
    forced: set[str] = set()
    if len(pilot_image_ids):
        if image_ids is None:
            raise ValueError("pilot_image_ids need the rows' image_ids")
        pilots = set(map(str, pilot_image_ids))
        forced = {c for c, i in zip(cluster_ids.tolist(), map(str, image_ids)) if i in pilots}
    target = max(len(forced), round(len(clusters) * design_fraction))
    design = set(forced)
    for cluster in clusters:
        if len(design) >= target:
            break
        design.add(cluster)
    return np.fromiter((c in design for c in cluster_ids.tolist()), dtype=bool, count=len(cluster_ids))


def _logistic(C: float, config: ReadoutConfig):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(
        C=C, solver="lbfgs", class_weight="balanced", max_iter=config.max_iter, random_state=config.seed
    )


def cross_validate_c(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, config: ReadoutConfig) -> list[dict]:
    """Out-of-fold metrics for every C of the grid (StratifiedGroupKFold, shuffled, seeded)."""
    from sklearn.model_selection import StratifiedGroupKFold

    folds = list(
        StratifiedGroupKFold(n_splits=config.n_splits, shuffle=True, random_state=config.seed).split(
            features, labels, groups
        )
    )
    rows = []
    for C in config.c_grid:
        predicted = np.empty_like(labels)
        for train, held_out in folds:
            model = _logistic(C, config).fit(features[train], labels[train])
            predicted[held_out] = model.predict(features[held_out])
        rows.append({"C": float(C), **level_metrics(predicted, labels)})
    return rows


@dataclass
class ReadoutFit:
    """A trained readout and what the training asset records about it."""

    lock: ReadoutLock
    cv_table: list[dict]
    chosen_c: float
    lock_metrics: dict
    n_design: int
    n_lock: int
    data_sha256: str
    config: ReadoutConfig
    policy_ids: list[str] = field(default_factory=list)

    def metadata(self) -> dict:
        return {
            "chosen_C": self.chosen_c,
            "cv_table": self.cv_table,
            "lock_metrics": self.lock_metrics,
            "n_design": self.n_design,
            "n_lock": self.n_lock,
            "data_sha256": self.data_sha256,
            "config": self.config.model_dump(),
            "policy_ids": self.policy_ids,
            "lock": self.lock.as_dict(),
        }

    def cv_arrow(self) -> pa.Table:
        return pa.Table.from_pylist(self.cv_table)

    def training_run(self) -> TrainingRun:
        """The fit's rows of `model_runs` (models/training_runs.py)."""
        return readout_training_run({"trained": True, **self.metadata()})


def data_sha256(*arrays) -> str:
    """SHA-256 over the training inputs (values and order), so a lock names the data it was fitted on."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.asarray(array)
        if array.dtype == object:
            digest.update("\x1f".join(map(str, array.ravel().tolist())).encode("utf-8"))
        else:
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(b"\x1e")
    return digest.hexdigest()


def train_readout(
    probabilities: np.ndarray, labels: np.ndarray, cluster_ids, image_ids=None, config: ReadoutConfig | None = None
) -> ReadoutFit:
    """Fit and lock a readout on validation rows: design/lock partition, grouped stratified CV over the
    C grid, the spec's selection order, refit on design, competence metrics on lock. Test rows must not
    be passed here; they meet only the returned lock."""
    config = config or ReadoutConfig()
    features = readout_features(probabilities)
    labels = check_levels(labels, "readout training rows")
    groups = np.asarray([str(c) for c in cluster_ids], dtype=object)
    design = validation_partition(
        groups,
        image_ids,
        seed=config.seed,
        design_fraction=config.design_fraction,
        pilot_image_ids=config.pilot_image_ids,
    )
    missing = sorted(set(range(4)) - set(labels[design].tolist()))
    if missing:
        raise ValueError(f"the design partition lacks level(s) {missing}; all four must occur")
    cv_table = cross_validate_c(features[design], labels[design], groups[design], config)
    chosen = best_by_spec_order(cv_table, tie_key="C")["C"]
    model = _logistic(chosen, config).fit(features[design], labels[design])
    lock = ReadoutLock(model.coef_.astype(np.float64), model.intercept_.astype(np.float64), C=chosen, seed=config.seed)
    lock_rows = ~design
    lock_metrics = (
        competence_metrics(lock.heads(np.asarray(probabilities)[lock_rows]), labels[lock_rows])
        if lock_rows.any()
        else {}
    )
    return ReadoutFit(
        lock=lock,
        cv_table=cv_table,
        chosen_c=chosen,
        lock_metrics=lock_metrics,
        n_design=int(design.sum()),
        n_lock=int(lock_rows.sum()),
        data_sha256=data_sha256(np.asarray(probabilities, dtype=np.float64), labels, groups),
        config=config,
        policy_ids=[policy_id(b) for b in config.biases],
    )


def _probability_matrix(scores: pa.Table) -> np.ndarray:
    return np.column_stack(
        [np.asarray(scores.column(c).to_numpy(zero_copy_only=False), dtype=np.float64) for c in PROBABILITY_COLUMNS]
    )


def train_readout_table(validation_scores: pa.Table, config: ReadoutConfig | None = None) -> ReadoutFit:
    """The training asset's one call: validation rows with `image_id, cluster_id, ideal_action_level`
    and the scorer's `p_very_low ... p_high`. Returns the fit; `fit.metadata()` is the asset metadata."""
    return train_readout(
        _probability_matrix(validation_scores),
        validation_scores.column("ideal_action_level").to_pylist(),
        validation_scores.column("cluster_id").to_pylist(),
        validation_scores.column("image_id").to_pylist(),
        config,
    )


def readout_proposals_table(scores: pa.Table, lock: ReadoutLock | None = None, **options) -> pa.Table:
    """The proposals asset's one call: `image_id, p_very_low ... p_high` (a scorer cache) -> proposals;
    `options` (bias, mechanism, source, model) are readout_proposals' own, with its defaults, so the two
    cannot disagree."""
    return readout_proposals(scores.column("image_id").to_pylist(), _probability_matrix(scores), lock, **options)


def readout_training_run(meta: dict) -> TrainingRun:
    """`model_runs` facts from a readout's metadata (`cohort_readout`'s, or `ReadoutFit.metadata()`): the
    C search (step_kind `cv`, step = position in the grid) and the lock at the chosen C (`lock`); for
    the published lock (nothing trained) its C and published CV metrics, the hash of the validation rows
    it was offered (on which it fell back), and why in config."""
    if not meta.get("trained", True):
        record = published_lock_record()
        published = {"C": record.get("C"), "cv_metrics": record.get("cv_metrics") or {}}
        config = {"trained": False, "reason": meta.get("reason"), "lock_source": LOCK_FILE}
        return TrainingRun(
            "readout",
            meta.get("data_sha256"),
            config,
            record.get("seed"),
            facts("published_lock", [published], chosen=True),
        )
    cv_table = meta["cv_table"]
    chosen = next(k for k, row in enumerate(cv_table, 1) if row["C"] == meta["chosen_C"])
    locked = {
        "step": chosen,
        "C": meta["chosen_C"],
        "n_design": meta["n_design"],
        "n_lock": meta["n_lock"],
        **meta["lock_metrics"],
    }
    return TrainingRun(
        "readout",
        meta["data_sha256"],
        meta["config"],
        meta["config"]["seed"],
        facts("cv", cv_table, chosen=chosen) + facts("lock", [locked], "step", chosen=True),
    )


def cohort_readout(validation_scores: pa.Table, config: ReadoutConfig | None = None) -> tuple[ReadoutLock, dict]:
    """The lake's readout: trained and locked on the cohort's validation rows (`train_readout_table`),
    or, where they cannot support the fit (fewer than two clusters, or a level absent from the design
    partition, as in a small synthetic cohort), the published lock, applied as shipped. The metadata
    says which (`trained`, and the `reason` when it is the published lock)."""
    levels = check_levels(
        validation_scores.column("ideal_action_level").to_pylist(), "readout training rows"
    )  # no fallback
    n_clusters = len(set(validation_scores.column("cluster_id").to_pylist()))
    try:
        if n_clusters < 2:
            raise ValueError(f"the validation split has {n_clusters} cluster(s); the design/lock partition needs two")
        fit = train_readout_table(validation_scores, config)
    except ValueError as err:
        record = published_lock_record()
        groups = np.asarray([str(c) for c in validation_scores.column("cluster_id").to_pylist()], dtype=object)
        offered = data_sha256(_probability_matrix(validation_scores), levels, groups)  # the rows it fell back on
        return published_lock(), {
            "trained": False,
            "reason": str(err),
            "validation_images": validation_scores.num_rows,
            "chosen_C": record.get("C"),
            "lock": published_lock().as_dict(),
            "lock_source": LOCK_FILE,
            "data_sha256": offered,
        }
    return fit.lock, {"trained": True, "validation_images": validation_scores.num_rows, **fit.metadata()}
