"""Cluster keys: AuthEval's lesion-or-image rule, DermoGPT's patient > lesion > exact hash, row order."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autheval.raw.clusters import assign_clusters, choose_key_rule, cluster_id_from_nodes


def _ids(table: pa.Table) -> dict[str, str]:
    return dict(zip(table["image_id"].to_pylist(), table["cluster_id"].to_pylist()))


def test_patient_then_lesion_then_exact_hash():
    images = pa.table(
        {
            "image_id": ["i1", "i2", "i3", "i4", "i5", "i6"],
            "patient_id": ["P1", "P1", None, None, "P2", None],
            "lesion_id": ["L1", "L2", "L2", "L3", None, None],
        }
    )
    exact = pa.table({"image_id": ["i4", "i6"], "exact_group_id": ["EXACT_PHASH_000001"] * 2})
    assert choose_key_rule(images) == "patient_lesion_image"
    clusters = assign_clusters(images, exact)
    ids = _ids(clusters)
    # P1 holds i1, i2; i3 shares lesion L2 with i2, so it joins P1's cluster
    assert ids["i1"] == ids["i2"] == ids["i3"] == cluster_id_from_nodes(["base:patient:P1", "base:lesion:L2"])
    # i4 (lesion L3) and i6 (no keys) are exact duplicates
    assert ids["i4"] == ids["i6"] == cluster_id_from_nodes(["base:lesion:L3", "base:image:i6"])
    assert ids["i5"] == cluster_id_from_nodes(["base:patient:P2"])
    assert clusters["split_key"][0].as_py() == "patient_id_or_lesion_id_or_image_id+duplicate_group"
    assert (
        dict(zip(clusters["image_id"].to_pylist(), clusters["duplicate_group"].to_pylist()))["i6"]
        == "EXACT_PHASH_000001"
    )


def test_authevals_hybrid_rule_and_blank_ids():
    images = pa.table({"image_id": ["a", "b", "c"], "lesion_id": ["HAM_1", "", "HAM_1"]})
    assert choose_key_rule(images) == "lesion_image"
    ids = _ids(assign_clusters(images))
    assert ids["a"] == ids["c"] == cluster_id_from_nodes(["base:lesion:HAM_1"])
    assert ids["b"] == cluster_id_from_nodes(["base:image:b"])  # an empty lesion id is a missing one
    only_images = _ids(assign_clusters(images, key_rule="image"))
    assert len(set(only_images.values())) == 3
    with pytest.raises(ValueError, match="key rule"):
        assign_clusters(images, key_rule="lesion")


def test_ids_do_not_depend_on_row_order():
    images = pa.table(
        {"image_id": [f"I{i}" for i in range(8)], "lesion_id": ["A", None, "B", "A", None, "C", "B", None]}
    )
    exact = pa.table({"image_id": ["I1", "I5", "I7"], "exact_group_id": ["G1", "G1", "G2"]})
    forward = _ids(assign_clusters(images, exact))
    backward = _ids(assign_clusters(images.take(list(range(7, -1, -1))), exact.take([2, 1, 0])))
    assert forward == backward
    assert forward["I1"] == forward["I5"] == cluster_id_from_nodes(["base:image:I1", "base:lesion:C"])
