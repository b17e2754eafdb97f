"""Control mechanisms (AuthEval spec 5.3-5.5): the frozen heads with nearest-level slates against the
reference levels, and the option-likelihood head (softmax, s = p . RS, tau fitted on validation by mean
absolute level error)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pytest

from autheval.proposals.slates import (
    action_levels,
    frozen_head_proposals,
    nearest_level_slates,
    published_thresholds,
    threshold_heads,
)
from models.option_head import OptionHead, fit_option_head, fit_tau, option_probabilities
from tests.test_readout import explainable, h12, read_reference


def test_nearest_level_slates_follow_spec_5_5():
    assert nearest_level_slates(np.arange(4)).tolist() == [[0, 1, 2, 3], [1, 2, 0, 3], [2, 3, 1, 0], [3, 2, 1, 0]]


def reference_levels(trace: dict) -> np.ndarray:
    """The reference level of each test image from (a_head, Ug_head): U_g is rule-known (w_u = w_o = 1.2),
    one-to-one per head level (spec 4)."""
    severity = (0.5, 1.0, 2.0, 4.0)
    levels = []
    for head, ug in zip(action_levels(trace["a_head"]), trace["Ug_head"]):
        fits = [
            y
            for y in range(4)
            if abs((-1.2 * severity[y] * (y - head) if head < y else -1.2 * (head - y) if head > y else 0.0) - ug)
            < 1e-9
        ]
        assert len(fits) == 1
        levels.append(fits[0])
    return np.array(levels)


@pytest.mark.parametrize(
    "trace, column, bacc, counts",
    [
        ("trace_llava_med_head", "llava_med_head", 0.248756, [2599, 991, 143, 234]),
        ("trace_clip_probe", "clip_probe_head", 0.546368, [1964, 616, 973, 414]),
    ],
)
def test_frozen_head_balanced_accuracy_against_reference_levels(trace, column, bacc, counts):
    from sklearn.metrics import balanced_accuracy_score

    frozen = read_reference("frozen_proposal_heads")
    levels = dict(zip(read_reference(trace)["image_id"], reference_levels(read_reference(trace))))
    heads = action_levels(frozen[column])
    truth = np.array([levels[i] for i in frozen["image_id"]])
    assert round(balanced_accuracy_score(truth, heads), 6) == bacc
    assert np.bincount(heads, minlength=4).tolist() == counts


def test_frozen_head_proposals_explain_the_control_traces():
    """Nearest-level slates of the frozen heads give every published capacity-ceiling selection of both
    controls (first admissible action, spec 3.8), for some profile and risk bin of the image."""
    frozen = read_reference("frozen_proposal_heads")
    proposals = frozen_head_proposals(pa.table(frozen))
    assert proposals.num_rows == 2 * 3967 and set(proposals.column("source").to_pylist()) == {"frozen_proposal_heads"}
    for mechanism, trace_name in (("LLaVA-Med head", "trace_llava_med_head"), ("CLIP probe", "trace_clip_probe")):
        rows = [r for r in proposals.to_pylist() if r["mechanism"] == mechanism]
        trace = read_reference(trace_name)
        assert [r["image_id"] for r in rows] == trace["image_id"]
        assert [r["a_head"] for r in rows] == trace["a_head"]
        possible = explainable([tuple(s) for s in nearest_level_slates(np.arange(4)).tolist()], ["capacity_ceiling"])
        missing = 0
        for r, cluster, selected in zip(rows, trace["cluster_id"], trace["a_exec"]):
            key = (h12(f"20260706|burden|{cluster}") % 2 == 1, h12(f"20260706|aversion|{cluster}") % 2 == 1)
            missing += (int(r["a_head"][1]), int(selected[1])) not in possible[key]
        assert missing == 0, mechanism
    assert (
        rows[1]["slate"]
        == {
            "a0": ["a0", "a1", "a2", "a3"],
            "a1": ["a1", "a2", "a0", "a3"],
            "a2": ["a2", "a3", "a1", "a0"],
            "a3": ["a3", "a2", "a1", "a0"],
        }[rows[1]["a_head"]]
    )


def test_published_thresholds_and_strictly_below():
    tau = published_thresholds()["LLaVA-Med head"]["tau"]
    assert tau == [0.602433, 0.645141, 0.6605]
    assert threshold_heads(np.array([0.602433, 0.6024331, 0.66051, 0.1]), tau).tolist() == [0, 1, 3, 0]
    assert published_thresholds()["CLIP probe"]["tau"] == [0.459906, 0.551713, 0.662236]


def test_option_probabilities_are_a_softmax_of_the_log_likelihoods():
    scores = pa.table(
        {
            "image_id": ["b", "a", "a", "a", "a", "b", "b", "b"],
            "option": ["high", "low", "very_low", "high", "moderate", "low", "very_low", "moderate"],
            "loglik": [-1.0, -2.0, -1.0, -3.0, -2.0, -1.0, -1.0, -1.0],
        }
    )
    ids, probs = option_probabilities(scores)
    assert ids == ["a", "b"]
    e = [math.exp(-1), math.exp(-2), math.exp(-2), math.exp(-3)]
    assert probs[0].tolist() == pytest.approx([v / sum(e) for v in e], abs=1e-15)
    assert probs[1].tolist() == pytest.approx([0.25] * 4, abs=1e-15)
    with pytest.raises(ValueError, match="once"):
        option_probabilities(scores.slice(1))


def test_fit_tau_on_a_hand_case():
    # perfectly ordered: the cuts fall midway between neighbouring levels
    s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    tau, mae = fit_tau(s, np.array([0, 0, 1, 1, 2, 2, 3, 3]))
    assert tau.tolist() == pytest.approx([0.25, 0.45, 0.65]) and mae == 0.0
    # equal scores share a head: the two images at 0.2 (levels 0 and 1) cost 1 whichever head they get;
    # ties between cut sets go to the lowest cuts, so they get a1 (tau_1 below every score)
    tau, mae = fit_tau(np.array([0.2, 0.2, 0.5, 0.8]), np.array([0, 1, 1, 3]))
    assert mae == 0.25
    assert tau.tolist() == pytest.approx([-0.3, 0.65, 0.65])
    assert threshold_heads(np.array([0.2, 0.5, 0.8]), tau).tolist() == [1, 1, 3]


def brute_force_tau_mae(s: np.ndarray, y: np.ndarray) -> float:
    values = np.unique(s)
    cuts = np.r_[values[0] - 1.0, (values[:-1] + values[1:]) / 2, values[-1] + 1.0]
    return min(np.mean(np.abs(threshold_heads(s, t) - y)) for t in itertools.combinations_with_replacement(cuts, 3))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_tau_is_the_exact_minimum(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, size=40)
    s = np.round(0.1 + 0.2 * y + rng.normal(0, 0.15, size=40), 2)  # rounded: some equal scores
    tau, mae = fit_tau(s, y)
    assert mae == pytest.approx(brute_force_tau_mae(s, y), abs=1e-12)
    assert np.mean(np.abs(threshold_heads(s, tau) - y)) == pytest.approx(mae, abs=1e-12)
    assert list(tau) == sorted(tau)


def test_option_head_fits_on_validation_and_proposes_nearest_level_slates():
    levels = {"v1": 0, "v2": 1, "v3": 2, "v4": 3}
    # log-likelihoods peaked at the reference level
    rows = [
        (i, opt, 0.0 if k == y else -3.0)
        for i, y in levels.items()
        for k, opt in enumerate(("very_low", "low", "moderate", "high"))
    ]
    scores = pa.table(dict(zip(("image_id", "option", "loglik"), map(list, zip(*rows)))))
    head, meta = fit_option_head(scores, levels)
    assert meta["validation_mae"] == 0.0 and meta["validation_n"] == 4
    assert meta["validation_heads"] == {"a0": 1, "a1": 1, "a2": 1, "a3": 1}
    proposals = head.proposals(scores, mechanism="tiny LLaVA head").to_pylist()
    assert [r["a_head"] for r in proposals] == ["a0", "a1", "a2", "a3"]
    assert proposals[1]["slate"] == ["a1", "a2", "a0", "a3"]
    assert isinstance(head, OptionHead)


def test_option_scores_from_the_tiny_llava(tmp_path):
    tiny = pytest.importorskip("models.tiny")
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from models.option_head import option_scores_from_model

    path = tiny.build_tiny_llava(tmp_path / "llava")
    model = LlavaForConditionalGeneration.from_pretrained(path).eval()
    processor = AutoProcessor.from_pretrained(path)
    images = [Image.new("RGB", (32, 32), (40 * k, 90, 200 - 40 * k)) for k in range(3)]
    continuations = {"very_low": " very low", "low": " low", "moderate": " moderate", "high": " high"}
    scores = option_scores_from_model(
        model, processor, images, ["x0", "x1", "x2"], "<image> risk:", continuations, batch_size=2
    )
    assert scores.num_rows == 12 and np.isfinite(scores.column("loglik").to_numpy()).all()
    # one image alone gives the same numbers as in a batch
    alone = option_scores_from_model(model, processor, images[2:], ["x2"], "<image> risk:", continuations)
    batched = [r["loglik"] for r in scores.to_pylist() if r["image_id"] == "x2"]
    assert [r["loglik"] for r in alone.to_pylist()] == pytest.approx(batched, abs=1e-5)
    _, probs = option_probabilities(scores)
    assert probs.sum(axis=1) == pytest.approx(np.ones(3))
