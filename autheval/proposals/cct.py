"""Confidence-Consistency Test-time aggregation (CCT, DermoGPT section 1) as proposal mechanisms.

K prompt variants of one question give K probability vectors per case; an aggregator turns them into
one ranked slate. Everything is vectorised over a dense (cases, variants, options) array built from the
long `(case_id, variant, option, prob)` table, never a Python loop per case:

* `single`   variant 0 alone (K = 1);
* `vote`     each variant votes for its argmax; prob = vote share; ranked by votes, then mean
             probability, then the lower option;
* `meanprob` the unweighted mean (the barycenter p_bar);
* `confonly` / `consonly` / `cc`: q = sum_r w_r p_r with w = softmax_r(lam * C_r - beta * D_r), where
             C_r = top1 - top2 of p_r (confidence) and D_r = 0.5 ||p_r - p_bar||^2 (deviation);
             confonly has beta = 0, consonly lam = 0, cc both.

Ties always go to the lower option; options are ordered by label (a0 < a1 < ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from autheval.errors import RecordError
from autheval.proposals.slates import proposals_table
from autheval.vocabulary import ACTIONS, PROBABILITY_COLUMNS, PROBABILITY_SUM_TOLERANCE

METHODS = ("single", "vote", "meanprob", "confonly", "consonly", "cc")
# lambda and beta are declared hyper-parameters (the paper gives no default for decoding weights).
DEFAULT_LAM = 1.0
DEFAULT_BETA = 1.0
INPUT_COLUMNS = ("case_id", "variant", "option", "prob")
OUTPUT_COLUMNS = ("case_id", "option", "prob", "rank")
USES = {"single": (), "vote": (), "meanprob": (), "confonly": ("lam",), "consonly": ("beta",), "cc": ("lam", "beta")}


@dataclass(frozen=True)
class VariantProbabilities:
    """The validated input as a dense array: probs[case, variant, option]."""

    case_ids: np.ndarray  # (N,) sorted case ids (strings)
    options: tuple[str, ...]
    probs: np.ndarray  # (N, K, M) float64


@dataclass(frozen=True)
class Aggregate:
    """One aggregator's result: per case the aggregated prob of every option and its rank (0 = head)."""

    method: str
    case_ids: np.ndarray
    options: tuple[str, ...]
    prob: np.ndarray  # (N, M)
    order: np.ndarray  # (N, M) option indices, best first
    lam: float | None
    beta: float | None

    def ranks(self) -> np.ndarray:
        ranks = np.empty_like(self.order)
        np.put_along_axis(ranks, self.order, np.arange(self.order.shape[1])[None, :], axis=1)
        return ranks

    def long_table(self) -> pa.Table:
        """`case_id, option, prob, rank`, one row per case and option, in case then rank order."""
        n, m = self.order.shape
        return pa.table(
            {
                "case_id": pa.array(np.repeat(self.case_ids, m).tolist(), pa.string()),
                "option": pa.array(np.asarray(self.options, dtype=object)[self.order].ravel().tolist(), pa.string()),
                "prob": pa.array(np.take_along_axis(self.prob, self.order, axis=1).ravel(), pa.float64()),
                "rank": pa.array(np.tile(np.arange(m, dtype=np.int64), n), pa.int64()),
            }
        )

    def proposals(self, mechanism: str | None = None, source: str = "model", model: str | None = None) -> pa.Table:
        """The aggregate as a proposal mechanism in the `proposals` contract; p_* is the aggregated prob
        (vote share for `vote`) of actions a0..a3."""
        if self.options != ACTIONS:
            raise ValueError(f"proposals need the four actions {ACTIONS} as options, got {self.options}")
        slates = np.asarray([int(o[1:]) for o in self.options])[self.order]
        return proposals_table(
            mechanism or f"CCT {self.method}", self.case_ids.tolist(), slates, self.prob, source, model
        )


def _fail(source: str, column: str | None, rule: str, example: str | None = None):
    raise RecordError(source, column, rule, example)


def _typed_columns(table: pa.Table, source: str):
    """The four columns as numpy arrays; wrong header, nulls or non-numeric cells are named."""
    names = [n.strip() for n in table.column_names]
    extra = [n for n in names if n not in INPUT_COLUMNS]
    if extra:
        _fail(source, extra[0], f"unexpected column; the table must have exactly {', '.join(INPUT_COLUMNS)}")
    missing = [c for c in INPUT_COLUMNS if c not in names]
    if missing:
        _fail(source, missing[0], f"missing column; the table must have exactly {', '.join(INPUT_COLUMNS)}")
    if len(names) != len(set(names)):
        _fail(source, next(n for n in names if names.count(n) > 1), "column given more than once")
    table = table.rename_columns(names)
    if table.num_rows == 0:
        _fail(source, None, "the table has no rows")
    for column in INPUT_COLUMNS:
        nulls = table.column(column).null_count
        if nulls:
            row = table.column(column).is_null().to_pylist().index(True)
            _fail(source, column, "empty value", f"row {row + 1}")
    case = np.asarray([str(v) for v in table.column("case_id").to_pylist()], dtype=object)
    option = np.asarray([str(v).strip() for v in table.column("option").to_pylist()], dtype=object)
    variant = _numbers(table.column("variant"), source, "variant", integer=True)
    prob = _numbers(table.column("prob"), source, "prob", integer=False)
    return case, variant, option, prob


def _numbers(column: pa.ChunkedArray, source: str, name: str, integer: bool) -> np.ndarray:
    import pyarrow.compute as pc

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column = pc.cast(pc.utf8_trim_whitespace(column), pa.float64())
        except pa.ArrowInvalid:
            values = column.to_pylist()
            bad = next(i for i, v in enumerate(values) if not _parses(v))
            _fail(source, name, "must be a number", f"row {bad + 1}: {values[bad]!r}")
    elif not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        _fail(source, name, f"must be numeric, found type {column.type}")
    values = column.to_numpy().astype(np.float64)
    if not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        _fail(source, name, "must be finite", f"row {row + 1}: {values[row]}")
    if integer:
        if (values != np.round(values)).any() or (values < 0).any():
            row = int(np.flatnonzero((values != np.round(values)) | (values < 0))[0])
            _fail(
                source,
                name,
                "must be a non-negative integer (0 = the original prompt)",
                f"row {row + 1}: {values[row]}",
            )
        return values.astype(np.int64)
    return values


def _parses(value) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _option_key(label: str):
    """a0 < a1 < ... < a10: by the number after the letter."""
    return (label[0], int(label[1:]))


def variant_probabilities(table: pa.Table, source: str = "input") -> VariantProbabilities:
    """Validate a `(case_id, variant, option, prob)` table and make it dense. Rules, each one line
    naming the column: exactly these columns; known options (a0...a3); probabilities in [0, 1]; every
    case has the variants 0..K-1 and every variant every option once; each variant's probabilities sum
    to 1 within 1e-6."""
    case, variant, option, prob = _typed_columns(table, source)
    unknown = sorted(set(option.tolist()) - set(ACTIONS))
    if unknown:
        row = int(np.flatnonzero(option == unknown[0])[0])
        _fail(
            source, "option", f"unknown option {unknown[0]!r}; expected one of {', '.join(ACTIONS)}", f"row {row + 1}"
        )
    if ((prob < 0) | (prob > 1)).any():
        row = int(np.flatnonzero((prob < 0) | (prob > 1))[0])
        _fail(source, "prob", "probabilities must lie in [0, 1]", f"row {row + 1}: {prob[row]}")
    options = tuple(sorted(set(option.tolist()), key=_option_key))
    case_ids, case_code = np.unique(case, return_inverse=True)
    variants = np.unique(variant)
    n, k, m = len(case_ids), int(variants.max()) + 1, len(options)
    if variants.size != k:
        absent = sorted(set(range(k)) - set(variants.tolist()))[0]
        _fail(source, "variant", f"variants must be numbered 0..{k - 1}; variant {absent} is absent everywhere")
    labels, label_code = np.unique(option, return_inverse=True)  # string order (a10 < a2): remap
    option_code = np.asarray([options.index(label) for label in labels], dtype=np.int64)[label_code]
    counts = np.zeros((n, k, m), dtype=np.int64)
    np.add.at(counts, (case_code, variant, option_code), 1)
    if (counts > 1).any():
        c, v, o = np.argwhere(counts > 1)[0]
        _fail(
            source,
            "option",
            "each case, variant and option must appear once",
            f"case {case_ids[c]!r}, variant {v}, option {options[o]!r} appears {counts[c, v, o]} times",
        )
    per_variant = counts.sum(axis=2)
    if (per_variant == 0).any():
        c, v = np.argwhere(per_variant == 0)[0]
        _fail(
            source,
            "variant",
            f"every case needs all {k} variants (0..{k - 1})",
            f"case {case_ids[c]!r} lacks variant {v}",
        )
    if (counts == 0).any():
        c, v, o = np.argwhere(counts == 0)[0]
        _fail(
            source,
            "option",
            f"every variant needs all {m} options",
            f"case {case_ids[c]!r}, variant {v} lacks option {options[o]!r}",
        )
    probs = np.zeros((n, k, m), dtype=np.float64)
    probs[case_code, variant, option_code] = prob
    sums = probs.sum(axis=2)
    off = np.abs(sums - 1.0) > PROBABILITY_SUM_TOLERANCE
    if off.any():
        c, v = np.argwhere(off)[0]
        _fail(
            source,
            "prob",
            "each case's probabilities for one variant must sum to 1 within 1e-6",
            f"case {case_ids[c]!r}, variant {v}: sum {float(sums[c, v])!r}",
        )
    return VariantProbabilities(case_ids.astype(object), options, probs)


def descending_order(score: np.ndarray, *tie_scores: np.ndarray) -> np.ndarray:
    """Option indices by descending score, then descending tie scores, then the lower option."""
    m = score.shape[1]
    lower_first = np.broadcast_to(np.arange(m), score.shape)
    keys = (lower_first, *[-t for t in reversed(tie_scores)], -score)  # lexsort: last key is primary
    return np.lexsort(keys, axis=1)


def variant_weights(probs: np.ndarray, lam: float, beta: float) -> np.ndarray:
    """w_r = softmax_r(lam * C_r - beta * D_r) per case, shape (N, K)."""
    top = np.sort(probs, axis=2)
    confidence = top[:, :, -1] - top[:, :, -2] if probs.shape[2] > 1 else top[:, :, -1]
    barycenter = probs.mean(axis=1, keepdims=True)
    deviation = 0.5 * ((probs - barycenter) ** 2).sum(axis=2)
    with np.errstate(over="ignore", invalid="ignore"):
        logits = lam * confidence - beta * deviation
        logits -= logits.max(axis=1, keepdims=True)
    if not np.isfinite(logits).all():
        raise ValueError(f"CCT weights overflow with lam={lam}, beta={beta}: lam * C_r - beta * D_r is not finite")
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def aggregate(
    data: VariantProbabilities, method: str, lam: float | None = None, beta: float | None = None
) -> Aggregate:
    """Run one aggregator over every case at once."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    probs = data.probs
    used_lam = (DEFAULT_LAM if lam is None else float(lam)) if "lam" in USES[method] else None
    used_beta = (DEFAULT_BETA if beta is None else float(beta)) if "beta" in USES[method] else None
    for name, value in (("lam", used_lam), ("beta", used_beta)):
        if value is not None and not np.isfinite(value):  # NaN weights would give NaN probabilities
            raise ValueError(f"CCT {method}: {name} must be a finite number, got {value}")
    if method == "single":
        q = probs[:, 0, :]
        order = descending_order(q)
    elif method == "vote":
        k, m = probs.shape[1], probs.shape[2]
        winners = np.argmax(probs, axis=2)  # a variant's own tie goes to the lower option
        votes = (winners[:, :, None] == np.arange(m)[None, None, :]).sum(axis=1)
        q = votes / k
        order = descending_order(votes.astype(np.float64), probs.mean(axis=1))
    elif method == "meanprob":
        q = probs.mean(axis=1)
        order = descending_order(q)
    else:
        weights = variant_weights(probs, used_lam or 0.0, used_beta or 0.0)
        q = np.einsum("nk,nkm->nm", weights, probs)
        order = descending_order(q)
    return Aggregate(method, data.case_ids, data.options, np.asarray(q, dtype=np.float64), order, used_lam, used_beta)


def aggregate_table(
    table: pa.Table, method: str, lam: float | None = None, beta: float | None = None, source: str = "input"
) -> pa.Table:
    """`(case_id, variant, option, prob)` -> `(case_id, option, prob, rank)` for one method."""
    return aggregate(variant_probabilities(table, source), method, lam, beta).long_table()


def cct_proposals(
    table: pa.Table,
    method: str,
    lam: float | None = None,
    beta: float | None = None,
    mechanism: str | None = None,
    source: str = "model",
    model: str | None = None,
) -> tuple[pa.Table, dict]:
    """One CCT arm for the lake: its `proposals` rows (case_id = image_id) and its metadata; `model` (the
    scorer) is named if they break a proposals rule."""
    data = variant_probabilities(table, "variant probabilities")
    result = aggregate(data, method, lam, beta)
    meta = {
        "method": method,
        "lam": result.lam,
        "beta": result.beta,
        "n_cases": int(len(data.case_ids)),
        "n_variants": int(data.probs.shape[1]),
        "options": list(data.options),
    }
    return result.proposals(mechanism, source, model), meta


def variant_table_from_scores(scores: pa.Table) -> pa.Table:
    """A scorer's wide rows (`image_id, variant, p_very_low ... p_high`, one per image and prompt variant)
    as the long `(case_id, variant, option, prob)` table the aggregators read (level k = action a_k)."""
    n, m = scores.num_rows, len(PROBABILITY_COLUMNS)
    probs = np.column_stack(
        [np.asarray(scores.column(c).to_numpy(zero_copy_only=False), dtype=np.float64) for c in PROBABILITY_COLUMNS]
    )
    return pa.table(
        {
            "case_id": pa.array(
                np.repeat(np.asarray(scores.column("image_id").to_pylist(), dtype=object), m).tolist(), pa.string()
            ),
            "variant": pa.array(np.repeat(np.asarray(scores.column("variant").to_pylist(), dtype=np.int64), m)),
            "option": pa.array(list(ACTIONS) * n, pa.string()),
            "prob": pa.array(probs.ravel(), pa.float64()),
        }
    )
