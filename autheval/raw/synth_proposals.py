"""Simulated proposal mechanisms for a synthetic cohort (`proposals.csv` beside the cohort), so that
`autheval demo --source synthetic` runs images -> ... -> estimates with no other input.

Three mechanisms of different accuracy and escalation bias, each a probability vector over the four
risk levels per image, drawn from the image's true level (its diagnosis' risk stratum):

* `sharp_calibrated`   accurate, no bias: mass concentrated on the true level;
* `escalating`         moderately accurate, biased one level up (the cautious assistant);
* `diffuse`            weak: flat vectors, often wrong, slightly biased down.

A vector is softmax(-sharpness * |k - (level + bias)| + noise): sharpness sets accuracy, bias shifts
the mode, Gumbel-like noise makes each image differ. A pure function of (image ids, levels, seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from autheval.raw.ingest import RISK
from autheval.vocabulary import PROBABILITY_COLUMNS, RISK_LEVELS
from warehouse.atomic import atomic_path

PROPOSALS_FILE = "proposals.csv"


@dataclass(frozen=True)
class SimulatedMechanism:
    name: str
    sharpness: float  # higher: more mass on the (biased) target level
    bias: float  # levels added to the true level before scoring (+ escalates, - de-escalates)
    noise: float  # scale of per-image, per-level noise on the logits


MECHANISMS = (
    SimulatedMechanism("sharp_calibrated", sharpness=2.0, bias=0.0, noise=1.0),
    SimulatedMechanism("escalating", sharpness=2.5, bias=0.5, noise=0.8),
    SimulatedMechanism("diffuse", sharpness=0.3, bias=-0.3, noise=1.3),
)


def simulate_proposals(image_ids: list[str], levels: np.ndarray, seed: int, mechanisms=MECHANISMS) -> pa.Table:
    """mechanism, image_id, p_very_low .. p_high (rows sum to 1), one row per (mechanism, image)."""
    levels = np.asarray(levels, dtype=float)
    k = np.arange(len(RISK_LEVELS), dtype=float)
    parts = []
    for index, m in enumerate(mechanisms):
        rng = np.random.default_rng([seed, 7919, index])
        logits = -m.sharpness * np.abs(k[None, :] - (levels[:, None] + m.bias))
        logits += rng.gumbel(scale=m.noise, size=logits.shape)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        parts.append(
            pa.table(
                {
                    "mechanism": [m.name] * len(image_ids),
                    "image_id": list(image_ids),
                    **{c: pa.array(probs[:, j]) for j, c in enumerate(PROBABILITY_COLUMNS)},
                }
            )
        )
    return pa.concat_tables(parts)


def write_proposals(root: Path, image_ids: list[str], diagnoses: list[str], seed: int) -> Path:
    """Write `<root>/proposals.csv` for the cohort (atomic)."""
    import pyarrow.csv as pacsv

    levels = np.array([RISK_LEVELS.index(RISK[d]) for d in diagnoses])
    table = simulate_proposals(image_ids, levels, seed)
    target = Path(root) / PROPOSALS_FILE
    with atomic_path(target) as tmp:
        pacsv.write_csv(table, tmp)
    return target
