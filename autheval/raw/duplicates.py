"""Duplicate images: exact-hash groups and near-duplicate components at a declared Hamming threshold.

AuthEval (spec 1.7-1.8) unions exact pHash matches into clusters and only reports threshold-4
components; DermoGPT removes pairs within distance 2. Here any threshold k is a declared rule with a
declared use: 'report' (listed only), 'cluster' (its components are unioned into clusters, so they
never cross a split) or 'drop' (one image per component is kept, with a removal report).

Near pairs are found with a multi-index join in SQL (sql/duplicates/raw_near_pairs.sql): k+1 bands, candidates
share a band, each candidate verified by popcount(xor). Work is done on distinct hash values, so
images with identical hashes cost nothing extra; components come from the pair graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from autheval.columns import schema
from warehouse.sql import connect, load_sql

USES = ("report", "cluster", "drop")

COMPONENTS_SCHEMA = schema(
    "component_id component_size component_crosses_split threshold exact_hash_duplicate image_id split image_hash",
)
DUPLICATES_SCHEMA = schema(
    "hash_kind threshold use component_id component_size component_crosses_split exact_group_id",
    "exact_hash_duplicate image_id split image_hash",
)
REMOVALS_SCHEMA = schema("removed_image_id kept_image_id component_id hash_kind threshold")
PAIRS_SCHEMA = pa.schema([("hid_a", pa.int64()), ("hid_b", pa.int64()), ("distance", pa.int32())])


@dataclass(frozen=True)
class DuplicateRule:
    """A declared near-duplicate rule: Hamming threshold, what to do with it, which hash kind."""

    threshold: int
    use: str = "report"
    hash_kind: str = "autheval"

    def __post_init__(self):
        if self.use not in USES:
            raise ValueError(f"duplicate use must be one of {', '.join(USES)}, got {self.use!r}")
        if not 0 <= int(self.threshold) <= 63:
            raise ValueError(f"Hamming threshold must be in 0..63, got {self.threshold}")


# AuthEval's declared rule: exact groups always cluster (built in); threshold 4 is reported only.
AUTHEVAL_RULES = (DuplicateRule(4, "report"),)


def band_layout(k: int) -> pa.Table:
    """k+1 contiguous bit bands covering all 64 bits, widths as equal as possible."""
    m = min(int(k) + 1, 64)
    widths = [64 // m + (1 if j < 64 % m else 0) for j in range(m)]
    los = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(int)
    return pa.table(
        {
            "band": pa.array(range(m), pa.int32()),
            "lo": pa.array(los.tolist(), pa.int32()),
            "mask": pa.array([(1 << w) - 1 for w in widths], pa.uint64()),
        }
    )


def _values_table(values) -> pa.Table:
    array = pa.array(np.asarray(values, dtype=np.uint64), pa.uint64())
    return pa.table({"hid": pa.array(np.arange(len(array), dtype=np.int64)), "phash": array})


def near_pairs(values, k: int, con: duckdb.DuckDBPyConnection | None = None, method: str = "multi_index") -> pa.Table:
    """Pairs (hid_a < hid_b, distance) of distinct hash values within Hamming distance k.

    `values`: distinct uint64 hashes (hid = position). `method`: 'multi_index' (the banded join) or
    'all_pairs' (the brute-force baseline).
    """
    if int(k) <= 0 or len(values) < 2:
        return PAIRS_SCHEMA.empty_table()
    con = con or connect()
    con.register("hash_values", _values_table(values))
    if method == "multi_index":
        con.register("hash_bands", band_layout(k))
        query = "duplicates/raw_near_pairs"
    elif method == "all_pairs":
        query = "duplicates/raw_all_pairs"
    else:
        raise ValueError(f"unknown pair method {method!r}")
    table = con.execute(load_sql(query), {"k": int(k)}).arrow().read_all()
    con.unregister("hash_values")
    return table.cast(PAIRS_SCHEMA)


def hash_components(values, k: int, method: str = "multi_index") -> np.ndarray:
    """Connected-component label per distinct hash value (single linkage at distance <= k)."""
    n = len(values)
    pairs = near_pairs(values, k, method=method)
    a = pairs.column("hid_a").to_numpy()
    b = pairs.column("hid_b").to_numpy()
    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return labels


def _image_phash(hashes: pa.Table) -> pa.Table:
    return hashes.select(["image_id", "phash"]).cast(pa.schema([("image_id", pa.string()), ("phash", pa.uint64())]))


def exact_groups(hashes: pa.Table) -> pa.Table:
    """Exact-hash groups of (image_id, phash) rows: exact_group_id, group_size, image_id, image_hash."""
    con = connect()
    con.register("image_phash", _image_phash(hashes))
    return con.execute(load_sql("duplicates/raw_exact_groups")).arrow().read_all()


def _splits_table(splits: pa.Table | None) -> pa.Table:
    if splits is None:
        return pa.table({"image_id": pa.array([], pa.string()), "split": pa.array([], pa.string())})
    return splits.select(["image_id", "split"])


def components(hashes: pa.Table, k: int, splits: pa.Table | None = None, method: str = "multi_index") -> pa.Table:
    """Near-duplicate components of >= 2 images at threshold k, in the layout of AuthEval's
    phash_duplicate_report.csv (component_id PHASH_000001..., size, crosses split, ...)."""
    table = _image_phash(hashes)
    phash = table.column("phash").to_numpy()
    values, inverse = np.unique(phash, return_inverse=True)
    labels = hash_components(values, k, method=method) if k > 0 else np.arange(len(values))
    image_comp = labels[inverse]
    sizes = np.bincount(image_comp, minlength=int(image_comp.max()) + 1 if len(image_comp) else 0)
    keep = sizes[image_comp] >= 2 if len(image_comp) else np.zeros(0, dtype=bool)
    members = pa.table(
        {
            "image_id": table.column("image_id").filter(pa.array(keep)),
            "comp": pa.array(image_comp[keep].astype(np.int64)),
            "phash": pa.array(phash[keep], pa.uint64()),
        }
    )
    con = connect()
    con.register("component_members", members)
    con.register("image_splits", _splits_table(splits))
    out = con.execute(load_sql("duplicates/raw_components"), {"threshold": int(k)}).arrow().read_all()
    return out.cast(COMPONENTS_SCHEMA)


def find_duplicates(
    image_hashes: pa.Table,
    rules=AUTHEVAL_RULES,
    splits: pa.Table | None = None,
) -> pa.Table:
    """The `duplicates` table: one row per image and declared rule, plus the exact groups.

    Exact groups (threshold 0, use 'cluster', component_id = EXACT_PHASH_...) are always listed for
    the 'autheval' kind, since AuthEval's clusters union them. `image_hashes` is the image_hashes
    table (all kinds); each rule reads only its own kind.
    """
    parts = []
    exact = DuplicateRule(0, "cluster", "autheval")
    wanted = [exact] + [r for r in dict.fromkeys(rules) if r != exact]
    for rule in wanted:
        hashes = image_hashes.filter(pc.equal(image_hashes.column("hash_kind"), rule.hash_kind))
        if hashes.num_rows == 0:
            if image_hashes.num_rows == 0:
                continue  # no images at all: nothing to compare
            raise ValueError(f"no '{rule.hash_kind}' hashes for duplicate rule {rule}")
        groups = exact_groups(hashes)
        group_of = dict(zip(groups.column("image_id").to_pylist(), groups.column("exact_group_id").to_pylist()))
        comps = components(hashes, rule.threshold, splits)
        ids = comps.column("image_id").to_pylist()
        comp_ids = comps.column("component_id").to_pylist()
        if rule.threshold == 0:  # the exact groups themselves, under their AuthEval names
            comp_ids = [group_of[i] for i in ids]
        n = comps.num_rows
        parts.append(
            pa.table(
                {
                    "hash_kind": pa.array([rule.hash_kind] * n, pa.string()),
                    "threshold": pa.array([rule.threshold] * n, pa.int32()),
                    "use": pa.array([rule.use] * n, pa.string()),
                    "component_id": pa.array(comp_ids, pa.string()),
                    "component_size": comps.column("component_size"),
                    "component_crosses_split": comps.column("component_crosses_split"),
                    "exact_group_id": pa.array([group_of.get(i) for i in ids], pa.string()),
                    "exact_hash_duplicate": comps.column("exact_hash_duplicate"),
                    "image_id": comps.column("image_id"),
                    "split": comps.column("split"),
                    "image_hash": comps.column("image_hash"),
                },
                schema=DUPLICATES_SCHEMA,
            )
        )
    table = pa.concat_tables(parts) if parts else DUPLICATES_SCHEMA.empty_table()
    return table.sort_by(
        [
            ("hash_kind", "ascending"),
            ("threshold", "ascending"),
            ("use", "ascending"),
            ("component_id", "ascending"),
            ("image_id", "ascending"),
        ]
    )


def with_splits(duplicates: pa.Table, splits: pa.Table) -> pa.Table:
    """The duplicates table with each member's split and component_crosses_split filled in from
    `splits` (image_id, split: the clusters table), without searching for duplicates again. Equal to
    find_duplicates(image_hashes, rules, splits) for the duplicates find_duplicates(image_hashes, rules)."""
    con = connect()
    con.register("duplicates", duplicates)
    con.register("image_splits", _splits_table(splits))
    return con.execute(load_sql("duplicates/raw_duplicate_splits")).arrow().read_all().cast(DUPLICATES_SCHEMA)


def removals(duplicates: pa.Table) -> pa.Table:
    """For the 'drop' rules: components (unioned across drop rules) keep their smallest image_id;
    every other member is listed as removed, with the component that removed it."""
    drop = duplicates.filter(pc.equal(duplicates.column("use"), "drop")).to_pylist()
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_of: dict[tuple, str] = {}
    for r in drop:
        key = (r["hash_kind"], r["threshold"], r["component_id"])
        if key in first_of:
            a, b = find(first_of[key]), find(r["image_id"])
            if a != b:
                parent[max(a, b)] = min(a, b)
        else:
            first_of[key] = r["image_id"]
            find(r["image_id"])
    rows, seen = [], set()
    for r in sorted(drop, key=lambda r: (r["image_id"], r["hash_kind"], r["threshold"])):
        kept = find(r["image_id"])
        if r["image_id"] != kept and r["image_id"] not in seen:
            seen.add(r["image_id"])
            rows.append(
                dict(
                    removed_image_id=r["image_id"],
                    kept_image_id=kept,
                    component_id=r["component_id"],
                    hash_kind=r["hash_kind"],
                    threshold=r["threshold"],
                )
            )
    return pa.Table.from_pylist(rows, schema=REMOVALS_SCHEMA)


def union_groups(duplicates: pa.Table) -> pa.Table:
    """(image_id, group_id) of the components declared for clustering, other than the exact groups
    (which clusters.assign_clusters takes separately)."""
    mask = pc.and_(pc.equal(duplicates.column("use"), "cluster"), pc.greater(duplicates.column("threshold"), 0))
    chosen = duplicates.filter(mask)
    group = [
        f"{k}:le{t}:{c}"
        for k, t, c in zip(
            chosen.column("hash_kind").to_pylist(),
            chosen.column("threshold").to_pylist(),
            chosen.column("component_id").to_pylist(),
        )
    ]
    return pa.table({"image_id": chosen.column("image_id"), "group_id": pa.array(group, pa.string())})


def cross_split_report(duplicates: pa.Table) -> pa.Table:
    """One row per component whose members span more than one split."""
    con = connect()
    con.register("duplicates", duplicates)
    return con.execute(load_sql("duplicates/raw_cross_split")).arrow().read_all()
