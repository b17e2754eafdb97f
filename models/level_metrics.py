"""Metrics of a predicted action level against the reference level, and the study's lexicographic
selection order (lowest ordinal MAE, then highest balanced accuracy, then highest macro-F1), shared by
the readout's C search (spec 5.2) and the probe's epoch choice (spec 5.4)."""

from __future__ import annotations

import numpy as np

N_LEVELS = 4


def level_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Balanced accuracy (scikit-learn's: mean recall over the classes present), macro-F1 over all four
    levels (zero_division 0), ordinal MAE and accuracy."""
    from sklearn.metrics import balanced_accuracy_score, f1_score

    predicted = np.asarray(predicted, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    return {
        "mae": float(np.mean(np.abs(predicted - truth))),
        "balanced_accuracy": float(balanced_accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=list(range(N_LEVELS)), average="macro",
                                   zero_division=0)),
        "accuracy": float(np.mean(predicted == truth)),
    }


def competence_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict:
    """The readout's competence gate quantities (spec 5.2): metrics, actions used and their counts, the
    largest action share, the best constant level (argmin of mean |y - c|, ties to the lower level)
    and how much the head improves on its MAE."""
    predicted = np.asarray(predicted, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    counts = np.bincount(predicted, minlength=N_LEVELS)
    constant_mae = np.abs(truth[:, None] - np.arange(N_LEVELS)[None, :]).mean(axis=0)
    best = int(np.argmin(constant_mae))
    metrics = level_metrics(predicted, truth)
    return {
        **metrics,
        "n": int(truth.size),
        "actions_used": int((counts > 0).sum()),
        "action_counts": {f"a{k}": int(c) for k, c in enumerate(counts)},
        "max_action_share": float(counts.max() / max(truth.size, 1)),
        "best_constant_action": best,
        "best_constant_mae": float(constant_mae[best]),
        "mae_improvement": float(constant_mae[best] - metrics["mae"]),
    }


def best_by_spec_order(rows: list[dict], tie_key: str) -> dict:
    """The row with the lowest `mae`, then highest `balanced_accuracy`, then highest `macro_f1`, then
    the smallest `tie_key` (the smaller C; the earlier epoch)."""
    if not rows:
        raise ValueError("no candidates to choose from")
    return min(rows, key=lambda r: (r["mae"], -r["balanced_accuracy"], -r["macro_f1"], r[tie_key]))
