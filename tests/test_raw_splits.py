"""AuthEval's split algorithm for new data (spec 1.10) and the no-cluster-crosses-a-split check."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from autheval.errors import RecordError
from autheval.raw.splits import (
    assign_splits,
    check_no_cluster_crosses_split,
    cluster_signatures,
    crossing_clusters,
    split_sizes,
)


@pytest.mark.parametrize(
    "n,expected",
    [
        (30, (21, 4, 5)),  # 30 * 0.15 = 4.5 -> 4 (half to even)
        (10, (7, 2, 1)),  # 10 * 0.15 = 1.5 -> 2
        (1, (1, 0, 0)),
        (2, (1, 0, 1)),  # 2 * 0.70 = 1.4 -> 1
        (5, (4, 1, 0)),  # 3.5 -> 4 (even), 0.75 -> 1
        (2090, (1463, 314, 313)),
    ],
)
def test_split_sizes_round_half_to_even(n, expected):
    assert split_sizes(n) == expected


def _cohort(n_clusters: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    image_ids, cluster_ids, strata, profiles = [], [], [], []
    for c in range(n_clusters):
        stratum = ["very_low", "low", "moderate", "high"][rng.integers(4)]
        for j in range(int(rng.integers(1, 4))):
            image_ids.append(f"IMG_{len(image_ids):05d}")
            cluster_ids.append(f"cluster:{c:020x}")
            strata.append(stratum if j == 0 or rng.random() < 0.9 else None)
            profiles.append(["BCN_like", "RURAL_like"][c % 2])
    images = pa.table(
        {
            "image_id": image_ids,
            "risk_stratum": strata,
            "site_profile": profiles,
            "row_index": pa.array(np.arange(len(image_ids)), pa.int64()),
        }
    )
    clusters = pa.table({"image_id": image_ids, "cluster_id": cluster_ids})
    return images, clusters


def test_assign_splits_follows_the_reference_algorithm():
    images, clusters = _cohort(300)
    got = assign_splits(clusters, images)
    # the algorithm written out directly
    first = {}
    for cid, stratum, profile in zip(
        clusters["cluster_id"].to_pylist(), images["risk_stratum"].to_pylist(), images["site_profile"].to_pylist()
    ):
        first.setdefault(cid, [None, None])
        first[cid][0] = first[cid][0] or stratum
        first[cid][1] = first[cid][1] or profile
    by_sig = {}
    for cid, (stratum, profile) in first.items():
        by_sig.setdefault(f"{stratum}|{profile}", []).append(cid)
    rng = np.random.default_rng(20260706)
    expected = {}
    for sig in sorted(by_sig):
        ids = np.array(sorted(by_sig[sig]))
        rng.shuffle(ids)
        n_tr, n_va = int(round(len(ids) * 0.70)), int(round(len(ids) * 0.15))
        for i, cid in enumerate(ids):
            expected[cid] = "train" if i < n_tr else "val" if i < n_tr + n_va else "test"
    assert dict(zip(got["cluster_id"].to_pylist(), got["split"].to_pylist())) == expected
    assert crossing_clusters(got).num_rows == 0
    assert assign_splits(clusters, images).equals(got)  # deterministic
    assert not assign_splits(clusters, images, seed=1).equals(got)
    shares = {s: len({c for c, x in expected.items() if x == s}) / len(expected) for s in ("train", "val", "test")}
    assert abs(shares["train"] - 0.70) < 0.03 and abs(shares["val"] - 0.15) < 0.03


def test_signature_takes_the_first_non_null_in_manifest_order():
    images = pa.table(
        {
            "image_id": ["a", "b", "c"],
            "risk_stratum": [None, "high", "low"],
            "site_profile": ["HAM_like", None, "BCN_like"],
            "row_index": pa.array([2, 0, 1], pa.int64()),
        }
    )
    clusters = pa.table({"image_id": ["a", "b", "c"], "cluster_id": ["k", "k", "k"]})
    assert cluster_signatures(clusters, images).to_pylist() == [{"cluster_id": "k", "signature": "high|BCN_like"}]


def test_a_cluster_across_splits_is_an_error():
    table = pa.table({"image_id": ["a", "b", "c"], "cluster_id": ["k", "k", "m"], "split": ["train", "test", "val"]})
    assert crossing_clusters(table).to_pylist() == [
        {"cluster_id": "k", "n_images": 2, "n_splits": 2, "splits": "test,train"}
    ]
    with pytest.raises(RecordError, match="a cluster spans more than one split"):
        check_no_cluster_crosses_split(table)
