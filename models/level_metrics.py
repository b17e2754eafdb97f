"""Metrics of a predicted action level against the reference level, and the study's lexicographic
selection order (lowest ordinal MAE, then highest balanced accuracy, then highest macro-F1), shared by
the readout's C search (spec 5.2) and the probe's epoch choice (spec 5.4)."""

from __future__ import annotations

import numpy as np

N_LEVELS = 4


def check_levels(levels, source: str, column: str = "ideal_action_level") -> np.ndarray:
    """Reference levels as int64, refused (one line, the first bad row) unless each is an integer 0..3:
    a cast would turn 1.5 into 1, and a level 4 would make the readout fit a fifth class."""
    from autheval.errors import RecordError

    values = np.asarray(levels, dtype=object)
    bad = [k for k, v in enumerate(values.tolist()) if not _is_level(v)]
    if bad:
        raise RecordError(
            source,
            column,
            f"levels must be integers 0..{N_LEVELS - 1} (very_low..high)",
            f"row {bad[0] + 1}: {values[bad[0]]!r}; {len(bad)} row(s) in all",
        )
    return values.astype(np.int64)


def _is_level(value) -> bool:
    return (
        isinstance(value, (int, np.integer, float, np.floating))
        and not isinstance(value, bool)
        and float(value) in (0.0, 1.0, 2.0, 3.0)
    )


def level_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Balanced accuracy (scikit-learn's: mean recall over the classes present in the truth), macro-F1
    over all four levels (zero_division 0), ordinal MAE and accuracy.

    From one 4 x 4 confusion matrix with scikit-learn's formulas in its order of operations (recall =
    tp / true count; F1 = 2 tp / (true count + predicted count), 0 where both are 0), so the numbers are
    bit for bit scikit-learn's (a test checks) at a fraction of its input-validation cost: the probe
    scores every epoch and the readout every C of every fold."""
    predicted = np.asarray(predicted, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    if predicted.size == 0 or min(predicted.min(), truth.min()) < 0 or max(predicted.max(), truth.max()) >= N_LEVELS:
        return _sklearn_level_metrics(predicted, truth)
    confusion = np.bincount(truth * N_LEVELS + predicted, minlength=N_LEVELS * N_LEVELS).reshape(N_LEVELS, N_LEVELS)
    tp = np.diag(confusion).astype(np.float64)
    true_count = confusion.sum(axis=1).astype(np.float64)
    predicted_count = confusion.sum(axis=0).astype(np.float64)
    present = true_count > 0
    denominator = true_count + predicted_count
    f1 = np.divide(2.0 * tp, denominator, out=np.zeros(N_LEVELS), where=denominator > 0)
    return {
        "mae": float(np.mean(np.abs(predicted - truth))),
        "balanced_accuracy": float(np.mean(tp[present] / true_count[present])),
        "macro_f1": float(np.average(f1)),
        "accuracy": float(np.mean(predicted == truth)),
    }


def _sklearn_level_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """The same metrics through scikit-learn (levels outside 0..3, empty input)."""
    from sklearn.metrics import balanced_accuracy_score, f1_score

    return {
        "mae": float(np.mean(np.abs(predicted - truth))),
        "balanced_accuracy": float(balanced_accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=list(range(N_LEVELS)), average="macro", zero_division=0)),
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
