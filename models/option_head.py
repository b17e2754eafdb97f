"""The option-likelihood head ("language control", AuthEval spec 5.3) for any LLaVA-style model.

A model gives each of four options (level words or letters, one per risk level) a mean token
log-likelihood; softmax -> p; s = p . RS; the head is the number of validation-fitted thresholds tau
strictly below s, and the slate is the nearest-level slate (spec 5.5). The head works from a scores
table, so it is testable without a model; `option_scores_from_model` fills that table from a
transformers model when one is at hand.

tau is fitted on validation by minimising the mean absolute level error over all monotone thresholds
(exactly, by dynamic programming over the sorted scores); the published search is not shipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from autheval.proposals.slates import expected_risk_scores, nearest_level_slates, proposals_table, threshold_heads
from autheval.vocabulary import RISK_LEVELS

SCORE_COLUMNS = ("image_id", "option", "loglik")


def option_probabilities(scores: pa.Table, options=RISK_LEVELS) -> tuple[list[str], np.ndarray]:
    """(image_id, option, loglik) -> image ids (sorted) and softmax probabilities over `options` (in
    level order), vectorised. Every image needs every option exactly once."""
    options = tuple(options)
    image = np.asarray([str(v) for v in scores.column("image_id").to_pylist()], dtype=object)
    option = np.asarray([str(v) for v in scores.column("option").to_pylist()], dtype=object)
    loglik = np.asarray(scores.column("loglik").to_numpy(zero_copy_only=False), dtype=np.float64)
    unknown = sorted(set(option.tolist()) - set(options))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; expected {options}")
    image_ids, image_code = np.unique(image, return_inverse=True)
    labels, label_code = np.unique(option, return_inverse=True)
    option_code = np.asarray([options.index(label) for label in labels], dtype=np.int64)[label_code]
    counts = np.zeros((len(image_ids), len(options)), dtype=np.int64)
    np.add.at(counts, (image_code, option_code), 1)
    if (counts != 1).any():
        row, col = np.argwhere(counts != 1)[0]
        raise ValueError(
            f"image {image_ids[row]!r} has option {options[col]!r} {counts[row, col]} times; expected once"
        )
    if not np.isfinite(loglik).all():
        raise ValueError("log-likelihoods must be finite")
    table = np.empty(counts.shape)
    table[image_code, option_code] = loglik
    table -= table.max(axis=1, keepdims=True)
    probs = np.exp(table)
    return image_ids.tolist(), probs / probs.sum(axis=1, keepdims=True)


def _running_argmin(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix minima of `values` and the first index attaining each."""
    minima = np.minimum.accumulate(values)
    index = np.arange(values.size)
    new_minimum = np.r_[True, values[1:] < minima[:-1]]
    return minima, np.maximum.accumulate(np.where(new_minimum, index, 0))


def fit_tau(risk_scores: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, float]:
    """Thresholds tau_1 <= tau_2 <= tau_3 minimising mean |head - level| with head = #(tau < s).

    Images with equal s get equal heads, so the search runs over cut points between the sorted
    distinct scores: cost = sum over the four segments of sum |k - y|, minimised exactly with running
    minima (no grid, no loop over cases). A cut between two scores is placed at their midpoint; a cut
    below (above) every score at the lowest (highest) score minus (plus) 1. Ties between cut sets go
    to the lowest cuts. Returns (tau, mean absolute level error)."""
    s = np.asarray(risk_scores, dtype=np.float64)
    y = np.asarray(levels, dtype=np.int64)
    values, group = np.unique(s, return_inverse=True)
    n_levels = 4
    # cost[g, k] = sum over images in distinct-score group g of |k - y|
    counts = np.zeros((values.size, n_levels))
    np.add.at(counts, (group, y), 1)
    cost = counts @ np.abs(np.arange(n_levels)[:, None] - np.arange(n_levels)[None, :])
    prefix = np.vstack([np.zeros((1, n_levels)), np.cumsum(cost, axis=0)])  # prefix[c, k]: groups < c at level k
    # total(c1 <= c2 <= c3) = P0[c1] + P1[c2] - P1[c1] + P2[c3] - P2[c2] + P3[m] - P3[c3]
    best1, arg1 = _running_argmin(prefix[:, 0] - prefix[:, 1])
    best2, arg2 = _running_argmin(best1 + prefix[:, 1] - prefix[:, 2])
    total = best2 + prefix[:, 2] - prefix[:, 3] + prefix[-1, 3]
    c3 = int(np.argmin(total))
    c2 = int(arg2[c3])
    c1 = int(arg1[c2])
    edges = np.r_[values[0] - 1.0, values, values[-1] + 1.0]
    tau = np.array([(edges[c] + edges[c + 1]) / 2.0 for c in (c1, c2, c3)])
    return tau, float(total[c3] / y.size)


@dataclass(frozen=True)
class OptionHead:
    """A fitted option-likelihood head: thresholds on s = p . RS."""

    tau: np.ndarray
    validation_mae: float | None = None
    options: tuple[str, ...] = RISK_LEVELS

    def heads(self, probabilities: np.ndarray) -> np.ndarray:
        return threshold_heads(expected_risk_scores(probabilities), self.tau)

    def proposals(self, scores: pa.Table, mechanism: str = "LLaVA-style option head", **options) -> pa.Table:
        """The head's proposals over option scores (thresholded_proposals; `options`: source, model)."""
        image_ids, probs = option_probabilities(scores, self.options)
        return thresholded_proposals(mechanism, image_ids, probs, self.tau, **options)


def thresholded_proposals(
    mechanism: str, image_ids, probabilities: np.ndarray, tau, source: str = "model", model: str | None = None
) -> pa.Table:
    """Proposals of a thresholded head: #(tau < p . RS) as the head, nearest-level slates around it, the
    probabilities as p_*. The option head's rule and the probe's (models/probe.py), kept in one place so
    the two mechanisms cannot drift apart; `model` is named if they break a proposals rule."""
    heads = threshold_heads(expected_risk_scores(probabilities), tau)
    return proposals_table(mechanism, image_ids, nearest_level_slates(heads), probabilities, source, model)


def fit_option_head(
    validation_scores: pa.Table, validation_levels: dict, options=RISK_LEVELS
) -> tuple[OptionHead, dict]:
    """Fit tau on validation scores; `validation_levels` maps image_id -> reference level. Returns the
    head and the metadata an asset records (tau, validation MAE, n, head distribution)."""
    image_ids, probs = option_probabilities(validation_scores, options)
    levels = np.asarray([validation_levels[i] for i in image_ids], dtype=np.int64)
    tau, mae = fit_tau(expected_risk_scores(probs), levels)
    head = OptionHead(tau, mae, tuple(options))
    distribution = np.bincount(head.heads(probs), minlength=4)
    return head, {
        "tau": tau.tolist(),
        "validation_mae": mae,
        "validation_n": len(image_ids),
        "validation_heads": {f"a{k}": int(c) for k, c in enumerate(distribution)},
        "options": list(options),
    }


def option_scores_from_model(
    model,
    processor,
    images: list,
    image_ids: list[str],
    prompt: str,
    continuations: dict[str, str],
    batch_size: int = 8,
) -> pa.Table:
    """Mean token log-likelihood of every option continuation after `prompt` for each image, from any
        transformers image-text model with a processor (a LLaVA-style model: the prompt holds the image
        token). One forward pass per option for a batch of images: the prompt is the same text for every
    image, so no row needs padding and one continuation is appended to all of them. Returns the scores table
        `(image_id, option, loglik)` that `OptionHead` reads."""
    import torch

    tokenizer = getattr(processor, "tokenizer", processor)
    device = next(model.parameters()).device
    options = list(continuations)
    rows = []
    model.eval()
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        prompt_inputs = processor(images=chunk, text=[prompt] * len(chunk), return_tensors="pt")
        prompt_ids = prompt_inputs["input_ids"]
        for option in options:
            cont = tokenizer(continuations[option], add_special_tokens=False, return_tensors="pt")["input_ids"][0]
            ids = torch.cat([prompt_ids, cont.unsqueeze(0).expand(prompt_ids.shape[0], -1)], dim=1)
            mask = torch.cat(
                [prompt_inputs["attention_mask"], torch.ones(ids.shape[0], cont.numel(), dtype=torch.long)], dim=1
            )
            extra = {k: v.to(device) for k, v in prompt_inputs.items() if k not in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), **extra).logits
            # positions P-1 .. P+m-2 predict the continuation's m tokens
            p_len = prompt_ids.shape[1]
            step = torch.log_softmax(logits[:, p_len - 1 : p_len - 1 + cont.numel(), :].float(), dim=-1)
            picked = step.gather(2, cont.to(device).view(1, -1, 1).expand(ids.shape[0], -1, 1)).squeeze(2)
            for image_id, value in zip(image_ids[start : start + batch_size], picked.mean(dim=1).tolist()):
                rows.append({"image_id": image_id, "option": option, "loglik": float(value)})
    return pa.Table.from_pylist(
        rows, schema=pa.schema([("image_id", pa.string()), ("option", pa.string()), ("loglik", pa.float64())])
    )
