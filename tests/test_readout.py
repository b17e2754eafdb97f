"""The MedGemma action readout (AuthEval spec 5.2, 5.5): the embedded published lock, its slates under the
bias policies, what the published traces reveal about its slates, the validation partition and the C
search on synthetic features."""

from __future__ import annotations

import hashlib
import math
from itertools import permutations

import numpy as np
import pyarrow as pa
import pytest

from autheval.errors import RecordError
from autheval.proposals.slates import action_labels, nearest_level_slates, policy_id, ranked_slates
from models import readout
from models.level_metrics import best_by_spec_order
from models.readout import (
    ReadoutConfig,
    published_lock,
    published_lock_record,
    readout_proposals,
    train_readout,
    validation_partition,
)
from tests.conftest import reference_file

# spec 5.2, typed from the table (rows = classes, columns = log p_very_low ... log p_high)
SPEC_W = [
    [-0.20980844662329695, 0.14517763888027713, 0.1526763003271087, -0.03203222400849858],
    [0.0533037959937097, 0.053607081672468464, -0.010146825667282674, -0.0868159803138529],
    [0.1911142265278795, -0.029118298202817115, -0.10763996541310807, -0.07856552789971274],
    [-0.03460957589828497, -0.1696664223499195, -0.034889509246715834, 0.1974137322220708],
]
SPEC_B = [0.12846134949696458, 0.02120935506480866, -0.05703165042020319, -0.09263905414157203]


def test_embedded_lock_is_the_published_table():
    lock = published_lock()
    assert lock.coef.tolist() == SPEC_W and lock.intercept.tolist() == SPEC_B
    assert lock.C == 0.01 and lock.seed == 20260711
    record = published_lock_record()
    assert record["lock_metrics"]["n"] == 1417 and record["released_policy"]["policy_id"] == "bias_p000"


PROBS = [
    [0.7, 0.1, 0.1, 0.1],
    [0.05, 0.05, 0.1, 0.8],
    [0.25, 0.25, 0.25, 0.25],
    [0.1, 0.6, 0.2, 0.1],
    [0.02, 0.08, 0.5, 0.4],
]
# the ranked slates of PROBS under four bias policies (z_k + bias * k, stable descending)
SLATES = {
    0.0: ["a2a1a3a0", "a3a0a1a2", "a0a1a2a3", "a0a1a2a3", "a0a3a1a2"],
    -0.6: ["a0a1a2a3", "a0a1a3a2", "a0a1a2a3", "a0a1a2a3", "a0a1a3a2"],
    0.2: ["a2a3a1a0", "a3a2a0a1", "a3a2a1a0", "a0a1a3a2", "a3a0a1a2"],
    0.6: ["a3a2a1a0", "a3a2a1a0", "a3a2a1a0", "a3a2a1a0", "a3a2a0a1"],
}


def test_lock_class_scores_by_hand():
    scores = published_lock().class_scores(np.array(PROBS))
    for p, z in zip(PROBS, scores):
        x = [math.log(v) for v in p]
        assert z.tolist() == pytest.approx(
            [sum(w * f for w, f in zip(row, x)) + b for row, b in zip(SPEC_W, SPEC_B)], abs=1e-15
        )
    # uniform p: z_k = log(0.25) * sum_j W_kj + b_k
    assert scores[2][0] == pytest.approx(math.log(0.25) * sum(SPEC_W[0]) + SPEC_B[0], abs=1e-15)


@pytest.mark.parametrize("bias", sorted(SLATES))
def test_published_lock_slates_under_bias_policies(bias):
    slates = action_labels(published_lock().slates(np.array(PROBS), bias=bias))
    assert ["".join(s) for s in slates.tolist()] == SLATES[bias]
    two = action_labels(published_lock().slates(np.array(PROBS), bias=bias, slate_size=2))
    assert ["".join(s) for s in two.tolist()] == [s[:4] for s in SLATES[bias]]


def test_policy_ids_and_tie_order():
    assert [policy_id(b) for b in (-0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6)] == [
        "bias_m060",
        "bias_m040",
        "bias_m020",
        "bias_p000",
        "bias_p020",
        "bias_p040",
        "bias_p060",
    ]
    assert ranked_slates(np.array([[0.0, 1.0, 1.0, 0.0]])).tolist() == [[1, 2, 0, 3]]
    # a bias that makes two adjusted scores equal keeps the lower action first
    assert ranked_slates(np.array([[0.5, 0.0, 0.0, 0.0]]), bias=0.25).tolist() == [[3, 0, 2, 1]]  # 0.5 .25 .5 .75


def test_probabilities_are_checked_and_clipped():
    with pytest.raises(RecordError, match="sum to 1 within 1e-5"):
        readout.readout_features(np.array([[0.5, 0.5, 0.0, 2e-5]]))
    with pytest.raises(RecordError):
        readout.readout_features(np.array([[1.2, -0.2, 0.0, 0.0]]))
    x = readout.readout_features(np.array([[1.0, 0.0, 0.0, 5e-6]]))
    assert x[0].tolist() == pytest.approx([0.0, math.log(1e-8), math.log(1e-8), math.log(5e-6)])


def test_readout_proposals_contract():
    table = readout_proposals(["i1", "i2"], np.array(PROBS[:2]))
    rows = table.to_pylist()
    assert rows[0]["slate"] == ["a2", "a1", "a3", "a0"] and rows[0]["a_head"] == "a2"
    assert rows[1]["p_high"] == 0.8 and rows[1]["mechanism"] == "MedGemma readout" and rows[1]["source"] == "model"


# ---------------------------------------------------------------- what the published traces reveal

PROFILES = {"BCN_like": (3, 0), "HAM_like": (2, 0), "MSK_like": (3, 1), "RURAL_like": (1, -1)}  # capacity, floor shift


def review_band(regime: str, profile: str, bin_level: int, burden_high: bool, averse: bool) -> list[int]:
    """Spec 3.5-3.7, written out independently of the lake's review engine."""
    capacity, shift = PROFILES[profile]
    floor = min(max((0, 0, 1, 2)[bin_level] + shift, 0), 3)
    low, high = {"capacity_ceiling": (0, capacity), "safety_floor": (floor, 3), "mixed": (floor, capacity)}[regime]
    band = [level for level in range(4) if low <= level <= high]
    if averse and 3 in band:
        band.remove(3)
    if burden_high and 1 in band:
        if bin_level <= 1 and 0 in band:
            band.remove(1)
        elif bin_level >= 2 and 2 in band:
            band.remove(1)
    return band or ([0] if bin_level <= 1 else [2])


def first_admissible(slate, band) -> int:
    return next(a for a in slate if a in band)


def h12(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


def explainable(slates, regimes) -> dict:
    """(burden_high, averse) -> every (head, selection per regime) some slate, profile and risk bin give."""
    out = {}
    for burden in (False, True):
        for averse in (False, True):
            out[burden, averse] = {
                (s[0], *[first_admissible(s, review_band(r, p, b, burden, averse)) for r in regimes])
                for s in slates
                for p in PROFILES
                for b in range(4)
            }
    return out


def read_reference(name: str) -> dict:
    path = reference_file(name)
    if path.suffix == ".csv":
        from pyarrow import csv

        return csv.read_csv(path).to_pydict()
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pydict()


def unexplained_images(slates, traces: dict[str, dict]) -> int:
    regimes = list(traces)
    first = traces[regimes[0]]
    possible = explainable([tuple(s) for s in slates], regimes)

    def level(a):
        return int(a[1:])

    bad = 0
    for i, cluster in enumerate(first["cluster_id"]):
        burden = h12(f"20260706|burden|{cluster}") % 2 == 1
        averse = h12(f"20260706|aversion|{cluster}") % 2 == 1
        seen = (level(first["a_head"][i]), *[level(traces[r]["a_exec"][i]) for r in regimes])
        bad += seen not in possible[burden, averse]
    return bad


def lock_slates(lock, bias: float = 0.0) -> set[tuple]:
    """Every full ranking the lock produces over a dense sample of the probability simplex."""
    rng = np.random.default_rng(20260711)
    found = set()
    for alpha in (0.02, 0.1, 0.3, 1.0, 3.0):
        p = rng.dirichlet([alpha] * 4, size=40000)
        found |= set(map(tuple, lock.slates(p / p.sum(axis=1, keepdims=True), bias).tolist()))
    return found


def test_published_traces_are_explained_by_slates_of_the_lock():
    """The release has no probabilities, so slates cannot be recomputed row by row. What the traces do
    fix: one slate per image (head + three selections under mixed, capacity and safety review). Every one
    of the 3,967 images is explained by a slate the published lock produces (with the image's private
    factors, some profile and risk bin), while the controls' nearest-level slates leave 439 unexplained
    (spec 5.5: the readout's slates are not distance-based)."""
    traces = {r: read_reference(f"trace_{r}") for r in ("mixed", "capacity_ceiling", "safety_floor")}
    ids = traces["mixed"]["image_id"]
    assert len(ids) == 3967 and all(
        t["image_id"] == ids and t["a_head"] == traces["mixed"]["a_head"] for t in traces.values()
    )
    assert set(traces["mixed"]["policy_id"]) == {"bias_p000"} and set(traces["mixed"]["slate_size"]) == {4}
    slates = lock_slates(published_lock())
    assert len(slates) < 24  # the lock reaches only some of the 24 orders
    assert (3, 0, 1, 2) in slates and (3, 2, 1, 0) in slates  # spec 5.5: a3 heads fall to a0 or down the ladder
    assert unexplained_images(slates, traces) == 0
    assert unexplained_images(nearest_level_slates(np.arange(4)).tolist(), traces) == 439


def test_the_trace_check_can_fail():
    traces = {r: read_reference(f"trace_{r}") for r in ("mixed", "capacity_ceiling", "safety_floor")}
    without_a3_then_a0 = [s for s in permutations(range(4)) if s[:2] not in {(3, 0)}]
    assert unexplained_images(without_a3_then_a0, traces) > 0


# ---------------------------------------------------------------- fitting


def test_validation_partition_orders_whole_clusters_by_hash():
    clusters = [f"cluster:{k:03d}" for k in range(40) for _ in range(k % 3 + 1)]
    images = [f"img{k}" for k in range(len(clusters))]
    design = validation_partition(clusters, images, seed=7, design_fraction=0.5, pilot_image_ids=["img0"])
    by_hash = sorted(set(clusters), key=lambda c: hashlib.sha256(f"7|validation_partition|{c}".encode()).hexdigest())
    expected = {"cluster:000"}
    for c in by_hash:
        if len(expected) == 20:
            break
        expected.add(c)
    assert {c for c, d in zip(clusters, design) if d} == expected
    assert all(
        design[i] == design[j] for i in range(len(clusters)) for j in range(len(clusters)) if clusters[i] == clusters[j]
    )


def test_selection_order_lowest_mae_then_bacc_then_f1_then_smaller_c():
    def row(C, mae, bacc, f1):
        return {"C": C, "mae": mae, "balanced_accuracy": bacc, "macro_f1": f1}

    assert best_by_spec_order([row(0.01, 0.9, 0.5, 0.5), row(1.0, 0.8, 0.1, 0.1)], "C")["C"] == 1.0
    assert best_by_spec_order([row(0.01, 0.8, 0.4, 0.9), row(1.0, 0.8, 0.5, 0.1)], "C")["C"] == 1.0
    assert best_by_spec_order([row(0.01, 0.8, 0.5, 0.4), row(1.0, 0.8, 0.5, 0.6)], "C")["C"] == 1.0
    assert best_by_spec_order([row(10.0, 0.8, 0.5, 0.5), row(0.1, 0.8, 0.5, 0.5)], "C")["C"] == 0.1


def synthetic_validation(n_clusters=240, seed=3):
    """Probabilities that carry the level (with noise), two images per cluster sharing the level."""
    rng = np.random.default_rng(seed)
    levels = np.repeat(rng.integers(0, 4, size=n_clusters), 2)
    logits = 2.5 * np.eye(4)[levels] + rng.normal(0, 1.0, size=(levels.size, 4))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    clusters = np.repeat([f"cluster:{k:04d}" for k in range(n_clusters)], 2)
    return probs, levels, clusters


def test_train_readout_picks_the_known_best_c():
    probs, levels, clusters = synthetic_validation()
    # C = 1e-6 shrinks every coefficient to ~0: a (near) constant head; C = 1 reads the level
    config = ReadoutConfig(c_grid=(1e-6, 1.0), design_fraction=0.6)
    fit = train_readout(probs, levels, clusters, config=config)
    assert [r["C"] for r in fit.cv_table] == [1e-6, 1.0]
    assert fit.chosen_c == 1.0
    assert fit.cv_table[1]["mae"] < fit.cv_table[0]["mae"]
    assert fit.cv_table[1]["balanced_accuracy"] > 0.6
    assert fit.n_design + fit.n_lock == len(levels) and fit.lock_metrics["n"] == fit.n_lock
    assert fit.lock_metrics["balanced_accuracy"] > 0.6
    assert fit.lock_metrics["mae_improvement"] == pytest.approx(
        fit.lock_metrics["best_constant_mae"] - fit.lock_metrics["mae"]
    )
    meta = fit.metadata()
    assert meta["chosen_C"] == 1.0 and len(meta["data_sha256"]) == 64 and meta["config"]["n_splits"] == 4
    assert meta["policy_ids"][3] == "bias_p000"
    assert isinstance(fit.cv_arrow(), pa.Table)
    # the fitted lock is a readout like the published one
    heads = fit.lock.heads(probs)
    assert np.mean(heads == levels) > 0.6
    # deterministic: same data, same lock
    again = train_readout(probs, levels, clusters, config=config)
    assert again.lock.coef.tolist() == fit.lock.coef.tolist() and again.data_sha256 == fit.data_sha256


def test_table_entry_points_for_the_assets():
    probs, levels, clusters = synthetic_validation(n_clusters=80, seed=5)
    table = pa.table(
        {
            "image_id": [f"img{k}" for k in range(len(levels))],
            "cluster_id": clusters.tolist(),
            "ideal_action_level": levels.tolist(),
            **{c: probs[:, k] for k, c in enumerate(("p_very_low", "p_low", "p_moderate", "p_high"))},
        }
    )
    fit = readout.train_readout_table(table, ReadoutConfig(c_grid=(1.0,)))
    assert fit.chosen_c == 1.0 and fit.n_design + fit.n_lock == table.num_rows
    proposals = readout.readout_proposals_table(table.slice(0, 3))
    assert proposals.column("slate").to_pylist() == action_labels(published_lock().slates(probs[:3])).tolist()


@pytest.mark.parametrize("bad", [4, -1, 2.5])
def test_levels_outside_the_four_are_refused_not_fitted(bad):
    """A level 4 fitted a 5-class lock (and cohort_readout's fallback must not hide it)."""
    from autheval.errors import RecordError

    probs, levels, clusters = synthetic_validation(n_clusters=40, seed=7)
    labels = levels.astype(object)
    labels[5] = bad
    with pytest.raises(RecordError, match=r"column 'ideal_action_level': levels must be integers 0..3.*row 6"):
        train_readout(probs, labels, clusters, config=ReadoutConfig(c_grid=(1.0,)))
    table = pa.table(
        {
            "image_id": [f"img{k}" for k in range(len(levels))],
            "cluster_id": clusters.tolist(),
            "ideal_action_level": pa.array(labels.tolist(), pa.float64()),
            **{c: probs[:, k] for k, c in enumerate(("p_very_low", "p_low", "p_moderate", "p_high"))},
        }
    )
    with pytest.raises(RecordError, match="levels must be integers 0..3"):
        readout.cohort_readout(table)


def test_the_training_run_names_the_c_search_lock_data_and_config():
    """Issue 16 item 3: the rows `model_runs` keeps for a trained readout and for the published fallback."""
    import json

    from models.training_runs import SCHEMA

    probs, levels, clusters = synthetic_validation()
    config = ReadoutConfig(c_grid=(1e-6, 1.0), design_fraction=0.6)
    fit = train_readout(probs, levels, clusters, config=config)
    table = fit.training_run().table("VLM readout", "tiny-gemma3", "rev")
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    cv = [r for r in rows if r["step_kind"] == "cv"]
    assert {(r["step"], r["value"]) for r in cv if r["metric"] == "C"} == {(1, 1e-6), (2, 1.0)}
    assert {r["step"] for r in cv if r["chosen"]} == {2} and not any(r["chosen"] for r in cv if r["step"] == 1)
    assert {(r["step"], r["metric"]): r["value"] for r in cv} == {
        (k, metric): value for k, row in enumerate(fit.cv_table, 1) for metric, value in row.items()
    }
    lock = {r["metric"]: r["value"] for r in rows if r["step_kind"] == "lock"}
    assert lock["C"] == 1.0 and lock["n_lock"] == fit.n_lock
    assert lock["balanced_accuracy"] == fit.lock_metrics["balanced_accuracy"]
    assert all(r["chosen"] and r["step"] == 2 for r in rows if r["step_kind"] == "lock")
    assert {r["data_sha256"] for r in rows} == {fit.data_sha256} and {r["seed"] for r in rows} == {config.seed}
    assert {json.loads(r["config"])["c_grid"] == [1e-6, 1.0] for r in rows} == {True}
    assert {(r["trainer"], r["mechanism"], r["model"], r["model_revision"]) for r in rows} == {
        ("readout", "VLM readout", "tiny-gemma3", "rev")
    }

    rows12 = [
        {
            "image_id": f"i{k}",
            "cluster_id": f"c{k}",
            "ideal_action_level": k % 2,
            "p_very_low": 0.4,
            "p_low": 0.3,
            "p_moderate": 0.2,
            "p_high": 0.1,
        }
        for k in range(12)
    ]
    _, meta = readout.cohort_readout(pa.Table.from_pylist(rows12))  # levels 2, 3 absent: the published lock
    fallback = readout.readout_training_run(meta).table("VLM readout").to_pylist()
    assert {r["step_kind"] for r in fallback} == {"published_lock"} and all(r["chosen"] for r in fallback)
    assert {r["value"] for r in fallback if r["metric"] == "C"} == {0.01}
    offered = readout.data_sha256(
        np.full((12, 4), [0.4, 0.3, 0.2, 0.1]),
        np.arange(12) % 2,
        np.asarray([f"c{k}" for k in range(12)], dtype=object),
    )
    assert {r["data_sha256"] for r in fallback} == {offered}  # the rows it fell back on
    assert "lacks level" in json.loads(fallback[0]["config"])["reason"]
