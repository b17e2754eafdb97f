"""Near-duplicate search: the multi-index SQL join equals brute force; components, rules and uses."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autheval.raw.clusters import assign_clusters
from autheval.raw.duplicates import (
    DuplicateRule,
    band_layout,
    components,
    cross_split_report,
    find_duplicates,
    near_pairs,
    removals,
    union_groups,
)


def planted_hashes(n: int, k: int, seed: int) -> np.ndarray:
    """Random 64-bit hashes with planted neighbours at distances 1..k+2 (some inside, some outside k)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    extra = []
    for _ in range(n // 3):
        value = int(base[rng.integers(n)])
        for bit in rng.choice(64, size=int(rng.integers(1, k + 3)), replace=False):
            value ^= 1 << int(bit)
        extra.append(value)
    return np.unique(np.concatenate([base, np.array(extra, dtype=np.uint64)]))


def brute_force(values: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    x = values[:, None] ^ values[None, :]
    dist = np.zeros(x.shape, dtype=np.int64)
    for shift in range(64):
        dist += ((x >> np.uint64(shift)) & np.uint64(1)).astype(np.int64)
    a, b = np.nonzero(np.triu(dist <= k, 1))
    return {(int(i), int(j), int(dist[i, j])) for i, j in zip(a, b)}


def as_set(table: pa.Table) -> set[tuple[int, int, int]]:
    return set(
        zip(table.column("hid_a").to_pylist(), table.column("hid_b").to_pylist(), table.column("distance").to_pylist())
    )


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6, 8])
def test_multi_index_equals_brute_force_on_seeded_hashes(k):
    values = planted_hashes(600, k, seed=k)
    expected = brute_force(values, k)
    assert len(expected) > 50  # the planted neighbours are there
    assert as_set(near_pairs(values, k)) == expected
    assert as_set(near_pairs(values, k, method="all_pairs")) == expected


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=40, unique=True),
    st.integers(1, 10),
    st.lists(st.integers(0, 63), max_size=6),
)
def test_multi_index_equals_brute_force_property(values, k, flips):
    base = values[0]
    for bit in flips:  # a neighbour of the first hash, so close pairs occur
        base ^= 1 << bit
    values = np.unique(np.array(values + [base], dtype=np.uint64))
    assert as_set(near_pairs(values, k)) == brute_force(values, k)


@pytest.mark.parametrize("k", [0, 1, 4, 7, 31, 63])
def test_band_layout_covers_all_bits_once(k):
    bands = band_layout(k).to_pylist()
    assert len(bands) == min(k + 1, 64)
    covered = 0
    for band in bands:
        mask = band["mask"] << band["lo"]
        assert covered & mask == 0
        covered |= mask
    assert covered == 2**64 - 1


def _table(pairs: dict[str, int]) -> pa.Table:
    return pa.table({"image_id": list(pairs), "phash": pa.array(list(pairs.values()), pa.uint64())})


HASHES = {  # two exact copies, a chain A-C (1 bit) C-D (2 bits), a pair E-F (1 bit), a far image
    "A": 0x0F0F_0000_0000_0001,
    "B": 0x0F0F_0000_0000_0001,
    "C": 0x0F0F_0000_0000_0003,
    "D": 0x0F0F_0000_0000_000F,
    "E": 0xFFFF_FFFF_0000_0000,
    "F": 0xFFFF_FFFF_0000_0001,
    "Z": 0x1234_5678_9ABC_DEF0,
}


def test_components_numbering_and_cross_split():
    splits = pa.table({"image_id": list(HASHES), "split": ["train", "train", "test", "train", "val", "val", "train"]})
    comps = components(_table(HASHES), 2, splits)
    rows = {r["image_id"]: r for r in comps.to_pylist()}
    assert set(rows) == {"A", "B", "C", "D", "E", "F"}
    assert rows["A"]["component_id"] == "PHASH_000001" and rows["D"]["component_id"] == "PHASH_000001"
    assert rows["E"]["component_id"] == "PHASH_000002" and rows["E"]["component_size"] == 2
    assert rows["A"]["component_crosses_split"] and not rows["E"]["component_crosses_split"]
    assert rows["A"]["exact_hash_duplicate"] and not rows["C"]["exact_hash_duplicate"]
    assert rows["A"]["image_hash"] == "0f0f000000000001"
    assert components(_table(HASHES), 1)["component_id"].to_pylist().count("PHASH_000001") == 3  # A, B, C


def test_find_duplicates_uses_and_removals():
    image_hashes = _table(HASHES).append_column("hash_kind", pa.array(["autheval"] * len(HASHES)))
    rules = (DuplicateRule(2, "drop"), DuplicateRule(4, "report"), DuplicateRule(1, "cluster"))
    dups = find_duplicates(image_hashes, rules)
    exact = dups.filter(pa.compute.equal(dups["threshold"], 0)).to_pylist()
    assert {r["image_id"] for r in exact} == {"A", "B"} and exact[0]["component_id"] == "EXACT_PHASH_000001"
    assert set(dups["use"].to_pylist()) == {"cluster", "drop", "report"}
    removed = removals(dups)
    assert removed.to_pylist() == [
        {
            "removed_image_id": "B",
            "kept_image_id": "A",
            "component_id": "PHASH_000001",
            "hash_kind": "autheval",
            "threshold": 2,
        },
        {
            "removed_image_id": "C",
            "kept_image_id": "A",
            "component_id": "PHASH_000001",
            "hash_kind": "autheval",
            "threshold": 2,
        },
        {
            "removed_image_id": "D",
            "kept_image_id": "A",
            "component_id": "PHASH_000001",
            "hash_kind": "autheval",
            "threshold": 2,
        },
        {
            "removed_image_id": "F",
            "kept_image_id": "E",
            "component_id": "PHASH_000002",
            "hash_kind": "autheval",
            "threshold": 2,
        },
    ]
    # 'cluster' at threshold 1 forces A, B, C and E, F together, on top of the exact group
    images = pa.table({"image_id": list(HASHES), "lesion_id": pa.nulls(len(HASHES), pa.string())})
    clusters = assign_clusters(images, None, union_groups(dups))
    cid = dict(zip(clusters["image_id"].to_pylist(), clusters["cluster_id"].to_pylist()))
    assert cid["A"] == cid["B"] == cid["C"] != cid["D"]
    assert cid["E"] == cid["F"] and len(set(cid.values())) == 4
    assert clusters["split_key"][0].as_py() == "image_id+duplicate_group+near_duplicate_component"


def test_cross_split_report():
    image_hashes = _table(HASHES).append_column("hash_kind", pa.array(["autheval"] * len(HASHES)))
    splits = pa.table({"image_id": list(HASHES), "split": ["train", "test", "test", "train", "val", "val", "train"]})
    report = cross_split_report(find_duplicates(image_hashes, (DuplicateRule(4),), splits)).to_pylist()
    assert [(r["threshold"], r["component_id"], r["splits"]) for r in report] == [
        (0, "EXACT_PHASH_000001", "test,train"),
        (4, "PHASH_000001", "test,train"),
    ]


def test_rule_validation():
    with pytest.raises(ValueError, match="use must be one of"):
        DuplicateRule(2, "delete")
    with pytest.raises(ValueError, match="threshold"):
        DuplicateRule(64)
