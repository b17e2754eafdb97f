"""Ranked slates (AuthEval spec 5.5) and the `proposals` contract: the one place where a mechanism's
scores or preferred level become an ordered list of actions.

Two constructions exist in the study and they differ on purpose (spec 9.3): the MedGemma readout ranks
all four actions by its class scores (plus a bias policy), while the control heads order the actions by
distance from one preferred level. Review selects the first admissible action of the slate, so the
construction, not only the head, drives the authority gap.
"""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pyarrow as pa

from autheval.vocabulary import (
    ACTIONS,
    MODEL_PROPOSALS_SCHEMA,
    PROBABILITY_COLUMNS,
    PROBABILITY_SUM_TOLERANCE,
    RISK_SCORES,
)


def policy_id(bias: float) -> str:
    """`bias_p000`, `bias_m060`, ...: the readout's bias policy name (spec 5.2)."""
    return "bias_" + ("m" if bias < 0 else "p") + f"{abs(round(100 * bias)):03d}"


def ranked_slates(scores: np.ndarray, bias: float = 0.0, slate_size: int = 4) -> np.ndarray:
    """Level indices ranked by descending `scores + bias * level`; ties keep the lower level first
    (a stable sort), as the readout does. Shape (n, slate_size)."""
    scores = np.asarray(scores, dtype=np.float64)
    adjusted = scores + bias * np.arange(scores.shape[1])
    order = np.argsort(-adjusted, axis=1, kind="stable")
    return order[:, :slate_size]


def nearest_level_slates(heads: np.ndarray) -> np.ndarray:
    """The control mechanisms' slates: all levels ordered by distance from the preferred level, the
    higher level first at equal distance (p=1 -> 1,2,0,3; p=2 -> 2,3,1,0). Shape (n, 4)."""
    heads = np.asarray(heads, dtype=np.int64)
    levels = np.arange(len(ACTIONS))
    distance = np.abs(levels[None, :] - heads[:, None])
    # sort key: distance ascending, then level descending; distance * 8 - level is unique per row
    return np.argsort(distance * 8 - levels[None, :], axis=1, kind="stable")


def action_labels(levels: np.ndarray) -> np.ndarray:
    """Level indices -> action strings ('a0'...'a3'), any shape."""
    return np.asarray(ACTIONS, dtype=object)[np.asarray(levels, dtype=np.int64)]


def action_levels(actions) -> np.ndarray:
    """Action strings ('a0'...'a3') -> level indices; anything else is an error."""
    values = np.asarray(actions, dtype=object)
    lookup = {a: k for k, a in enumerate(ACTIONS)}
    unknown = [a for a in set(values.ravel().tolist()) if a not in lookup]
    if unknown:
        raise ValueError(f"unknown action(s) {sorted(map(str, unknown))[:3]}; expected one of {', '.join(ACTIONS)}")
    return np.vectorize(lookup.__getitem__, otypes=[np.int64])(values) if values.size else values.astype(np.int64)


def expected_risk_scores(probabilities: np.ndarray) -> np.ndarray:
    """s = p . RS, the scalar the control heads threshold (spec 5.3, 5.4)."""
    return np.asarray(probabilities, dtype=np.float64) @ np.asarray(RISK_SCORES)


def threshold_heads(risk_scores: np.ndarray, tau) -> np.ndarray:
    """Preferred level = number of thresholds strictly below s (spec 5.3)."""
    tau = np.asarray(tau, dtype=np.float64)
    return (np.asarray(risk_scores, dtype=np.float64)[:, None] > tau[None, :]).sum(axis=1)


def published_thresholds() -> dict:
    """The study's validation-fitted tau of both control heads (spec 5.3, 5.4), embedded."""
    import json

    text = files("autheval").joinpath("data/models/control_thresholds.json").read_text(encoding="utf-8")
    return json.loads(text)


def proposals_table(
    mechanism: str,
    image_ids,
    slates: np.ndarray,
    probabilities: np.ndarray | None = None,
    source: str = "model",
    model: str | None = None,
) -> pa.Table:
    """Rows of the lake's `proposals` contract: slate as action strings, head = slate[0], p_* per level
    (null when the mechanism has no probabilities). Checked by `check_proposals` (`model` names the
    model that made them in the error)."""
    image_ids = [str(i) for i in image_ids]
    slates = np.asarray(slates, dtype=np.int64)
    n = slates.shape[0]
    outside = (slates < 0) | (slates >= len(ACTIONS))
    if outside.any():
        row = int(np.flatnonzero(outside.any(axis=1))[0])
        _refuse(
            mechanism,
            model,
            "slate levels must be 0..3 (actions a0..a3)",
            image_ids[row],
            slates[row].tolist(),
            int(outside.any(axis=1).sum()),
        )
    labels = action_labels(slates)
    columns = {
        "mechanism": pa.array([mechanism] * n, pa.string()),
        "image_id": pa.array(image_ids, pa.string()),
        "slate": pa.array(labels.tolist(), pa.list_(pa.string())),
        "a_head": pa.array(labels[:, 0].tolist(), pa.string()),
    }
    for k, column in enumerate(PROBABILITY_COLUMNS):
        values = None if probabilities is None else np.asarray(probabilities, dtype=np.float64)[:, k]
        columns[column] = pa.array(values if values is not None else [None] * n, pa.float64())
    columns["source"] = pa.array([source] * n, pa.string())
    return check_proposals(pa.table(columns, schema=MODEL_PROPOSALS_SCHEMA), model)


def _refuse(mechanism, model, rule: str, image_id, value, n_rows: int):
    where = (
        f"proposals of mechanism {mechanism!r} made by model {model}"
        if model
        else f"proposals of mechanism {mechanism!r}"
    )
    raise ValueError(f"{where}: {rule} (image {str(image_id)!r}: {value}; {n_rows} row(s) in all)")


def check_proposals(table: pa.Table, model: str | None = None) -> pa.Table:
    """A model's proposals under the rules a proposals file meets (sql/proposals/proposals_file_validate.sql):
    image ids given and unique per mechanism; the four probabilities all null or all finite,
    non-negative and summing to 1 within 1e-6; the slate 2 or 4 distinct actions of a0..a3 with a_head
    first. A broken model (a vision tower that outputs NaN) stops here, before `proposals`, with one
    line naming the mechanism and the model; the table is returned unchanged."""
    n = table.num_rows
    if n == 0:
        return table
    mechanisms = table.column("mechanism").to_pylist()
    ids = table.column("image_id").to_pylist()

    def refuse(bad: np.ndarray | np.bool_, rule: str, value) -> None:  # numpy types .all(axis=1) as either
        row = int(np.flatnonzero(bad)[0])
        _refuse(mechanisms[row], model, rule, ids[row], value(row), int(bad.sum()))

    empty = np.asarray([i is None or not str(i).strip() for i in ids])
    if empty.any():
        refuse(empty, "image_id must not be empty", lambda r: ids[r])
    seen: dict = {}
    duplicate = np.asarray([seen.setdefault((m, i), k) != k for k, (m, i) in enumerate(zip(mechanisms, ids))])
    if duplicate.any():
        refuse(duplicate, "one row per (mechanism, image_id): duplicate", lambda r: ids[r])
    nulls = np.column_stack([np.asarray(table.column(c).is_null()) for c in PROBABILITY_COLUMNS])
    p = np.column_stack(
        [np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64) for c in PROBABILITY_COLUMNS]
    )
    given = ~nulls.all(axis=1)

    def shown(r):
        return p[r].tolist()

    for bad, rule in (
        (nulls.any(axis=1) & given, "give all four probabilities or none"),
        (given & ~np.isfinite(p).all(axis=1), "probabilities must be finite numbers"),
        (given & (p < 0).any(axis=1), "probabilities must not be negative"),
        (given & (np.abs(p.sum(axis=1) - 1.0) > PROBABILITY_SUM_TOLERANCE), "probabilities must sum to 1 within 1e-6"),
    ):
        if bad.any():
            refuse(bad, rule, shown)
    slates = table.column("slate").to_pylist()
    heads = table.column("a_head").to_pylist()
    bad = np.asarray(
        [s is None or len(s) not in (2, 4) or len(set(s)) != len(s) or not set(s) <= set(ACTIONS) for s in slates]
    )
    if bad.any():
        refuse(bad, "the slate must be 2 or 4 distinct actions among a0 a1 a2 a3, best first", lambda r: slates[r])
    bad = np.asarray([h != s[0] for h, s in zip(heads, slates)])
    if bad.any():
        refuse(bad, "a_head must be the first action of the slate", lambda r: f"{heads[r]} vs {slates[r]}")
    return table


def frozen_head_proposals(frozen_heads: pa.Table) -> pa.Table:
    """The study's two control mechanisms from their frozen per-image heads (spec 5.3-5.5):
    nearest-level slates, no probabilities, source `frozen_proposal_heads`."""
    image_ids = frozen_heads.column("image_id").to_pylist()
    parts = []
    for mechanism, column in (("LLaVA-Med head", "llava_med_head"), ("CLIP probe", "clip_probe_head")):
        heads = action_levels(frozen_heads.column(column).to_pylist())
        parts.append(proposals_table(mechanism, image_ids, nearest_level_slates(heads), source="frozen_proposal_heads"))
    return pa.concat_tables(parts)
