"""Simulated mechanisms for synthetic cohorts: valid proposals, different accuracy and escalation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from autheval.proposals.proposals_file import proposals_from_table
from autheval.raw.synth_proposals import MECHANISMS, simulate_proposals


def _levels(n=3000, seed=5):
    return np.random.default_rng(seed).integers(0, 4, n)


def test_every_mechanism_gives_a_valid_proposal_per_image():
    levels = _levels()
    ids = [f"ISIC_{i:07d}" for i in range(len(levels))]
    table = simulate_proposals(ids, levels, seed=1)
    contract = proposals_from_table(table, "simulated", pa.array(ids))
    assert contract.num_rows == len(MECHANISMS) * len(ids)
    assert sorted(set(contract.column("mechanism").to_pylist())) == sorted(m.name for m in MECHANISMS)


def test_mechanisms_differ_in_accuracy_and_escalation():
    levels = _levels()
    ids = [str(i) for i in range(len(levels))]
    table = simulate_proposals(ids, levels, seed=1)
    probs = np.column_stack([table.column(c).to_numpy() for c in ("p_very_low", "p_low", "p_moderate", "p_high")])
    heads = probs.argmax(axis=1).reshape(len(MECHANISMS), -1)
    accuracy = {m.name: float((heads[i] == levels).mean()) for i, m in enumerate(MECHANISMS)}
    escalation = {m.name: float((heads[i] - levels).mean()) for i, m in enumerate(MECHANISMS)}
    assert accuracy["sharp_calibrated"] > 0.8 > accuracy["escalating"] > 0.5 > accuracy["diffuse"]
    assert escalation["escalating"] > 0.25 and abs(escalation["sharp_calibrated"]) < 0.05
    assert escalation["diffuse"] < escalation["sharp_calibrated"]


def test_same_seed_same_table_other_seed_other_table():
    levels = _levels(200)
    ids = [str(i) for i in range(200)]
    assert simulate_proposals(ids, levels, 3).equals(simulate_proposals(ids, levels, 3))
    assert not simulate_proposals(ids, levels, 3).equals(simulate_proposals(ids, levels, 4))
