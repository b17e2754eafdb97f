"""Clusters: the units that must never be split across train/val/test (AuthEval spec 1.9).

Each image has a base node (its patient, lesion or image key); images in the same exact-hash group
are forced together, and so are images of any near-duplicate component declared for clustering.
The cluster id hashes only the sorted base nodes of a connected component, so it is independent of
row order and reproduces AuthEval's ids (all 25,331 of the frozen ISIC 2019 split).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from autheval.columns import schema
from warehouse.sql import connect, load_sql

KEY_RULES = ("auto", "patient_lesion_image", "lesion_image", "image")
SEPARATOR = "\x1f"

CLUSTERS_SCHEMA = schema("image_id cluster_id base_node duplicate_group cluster_size split_key")


def cluster_id_from_nodes(base_nodes) -> str:
    """'cluster:' + first 20 hex digits of SHA-256 of the sorted distinct base nodes joined by U+001F."""
    payload = SEPARATOR.join(sorted(set(base_nodes)))
    return "cluster:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]


def _coverage(column: pa.ChunkedArray) -> float:
    return 0.0 if len(column) == 0 else 1.0 - column.null_count / len(column)


def choose_key_rule(images: pa.Table, key_rule: str = "auto") -> str:
    """Resolve 'auto': patient ids present -> patient, then lesion, then image (DermoGPT section 2);
    else any lesion id -> lesion, else image (AuthEval 1.9; with > 99 % coverage the same ids)."""
    if key_rule not in KEY_RULES:
        raise ValueError(f"key rule must be one of {', '.join(KEY_RULES)}, got {key_rule!r}")
    if key_rule != "auto":
        return key_rule
    names = images.column_names
    if "patient_id" in names and _coverage(images.column("patient_id")) > 0:
        return "patient_lesion_image"
    if "lesion_id" in names and _coverage(images.column("lesion_id")) > 0:
        return "lesion_image"
    return "image"


def split_key_name(rule: str, images: pa.Table, extra: bool) -> str:
    """The key's name as AuthEval records it (e.g. 'lesion_id_or_image_id+duplicate_group')."""
    if rule == "patient_lesion_image":
        name = "patient_id" if _coverage(images.column("patient_id")) > 0.99 else "patient_id_or_lesion_id_or_image_id"
    elif rule == "lesion_image":
        name = "lesion_id" if _coverage(images.column("lesion_id")) > 0.99 else "lesion_id_or_image_id"
    else:
        name = "image_id"
    return name + "+duplicate_group" + ("+near_duplicate_component" if extra else "")


def _blank_to_null(column: pa.ChunkedArray) -> pa.ChunkedArray:
    column = column.cast(pa.string())
    return pc.if_else(pc.equal(pc.utf8_trim_whitespace(column), ""), pa.scalar(None, pa.string()), column)


def assign_clusters(
    images: pa.Table,
    exact_groups: pa.Table | None = None,
    unions: pa.Table | None = None,
    key_rule: str = "auto",
) -> pa.Table:
    """Cluster id of every image.

    images: image_id, [lesion_id], [patient_id] (empty strings count as missing).
    exact_groups: image_id, exact_group_id (AuthEval's forced groups; `duplicate_group` column).
    unions: image_id, group_id -- further groups forced together (threshold-k 'cluster' components).
    Returns image_id, cluster_id, base_node, duplicate_group, cluster_size, split_key (by image_id).
    """
    rule = choose_key_rule(images, key_rule)
    n = images.num_rows
    nulls = pa.nulls(n, pa.string())
    cluster_input = pa.table(
        {
            "image_id": images.column("image_id").cast(pa.string()),
            "lesion_id": _blank_to_null(images.column("lesion_id")) if "lesion_id" in images.column_names else nulls,
            "patient_id": _blank_to_null(images.column("patient_id")) if "patient_id" in images.column_names else nulls,
        }
    )
    con = connect()
    con.register("cluster_input", cluster_input)
    base = con.execute(load_sql("duplicates/raw_cluster_base"), {"rule": rule}).arrow().read_all()
    image_ids = base.column("image_id").to_pylist()
    base_nodes = base.column("base_node").to_pylist()

    # Graph over node strings: each image's base node is joined to each of its forced nodes.
    node_index: dict[str, int] = {}
    for node in base_nodes:
        node_index.setdefault(node, len(node_index))
    position = {image_id: i for i, image_id in enumerate(image_ids)}
    edges_a: list[int] = []
    edges_b: list[int] = []

    def force(image_id: str, node: str) -> None:
        i = position.get(image_id)
        if i is None:
            return
        edges_a.append(node_index[base_nodes[i]])
        edges_b.append(node_index.setdefault(node, len(node_index)))

    for image_id, node in zip(image_ids, base.column("lesion_node").to_pylist()):
        if node is not None:
            force(image_id, node)
    duplicate_group = [None] * n
    if exact_groups is not None:
        for image_id, group in zip(
            exact_groups.column("image_id").to_pylist(), exact_groups.column("exact_group_id").to_pylist()
        ):
            force(image_id, "forced:" + group)
            if image_id in position:
                duplicate_group[position[image_id]] = group
    has_unions = unions is not None and unions.num_rows > 0
    if unions is not None and has_unions:
        for image_id, group in zip(unions.column("image_id").to_pylist(), unions.column("group_id").to_pylist()):
            force(image_id, "forced:" + group)
    size = len(node_index)
    graph = coo_matrix((np.ones(len(edges_a), dtype=np.int8), (edges_a, edges_b)), shape=(size, size))
    _, labels = connected_components(graph, directed=False)
    comp = labels[np.array([node_index[b] for b in base_nodes], dtype=np.int64)] if n else np.zeros(0, np.int64)

    con.register(
        "cluster_members",
        pa.table(
            {
                "image_id": pa.array(image_ids, pa.string()),
                "comp": pa.array(comp.astype(np.int64)),
                "base_node": pa.array(base_nodes, pa.string()),
            }
        ),
    )
    ids = con.execute(load_sql("duplicates/raw_cluster_ids")).arrow().read_all()
    group_of = dict(zip(image_ids, duplicate_group))
    out_ids = ids.column("image_id").to_pylist()
    return pa.table(
        {
            "image_id": ids.column("image_id"),
            "cluster_id": ids.column("cluster_id"),
            "base_node": ids.column("base_node"),
            "duplicate_group": pa.array([group_of[i] for i in out_ids], pa.string()),
            "cluster_size": ids.column("cluster_size"),
            "split_key": pa.array([split_key_name(rule, cluster_input, has_unions)] * len(out_ids), pa.string()),
        },
        schema=CLUSTERS_SCHEMA,
    )
