"""clusters: each image's lesion-aware cluster (patient / lesion id united with exact image hashes and
any threshold-k 'cluster' components; AuthEval-compatible ids) and its split (a frozen split,
validated, or AuthEval's split algorithm)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetCheckResult, asset, asset_check

from assets.common import DUPLICATES, check_row, write_table
from assets.duplicates import duplicates
from assets.images import images
from autheval.raw.clusters import assign_clusters
from autheval.raw.duplicates import exact_groups, union_groups
from autheval.raw.phash import hashes_of_kind
from autheval.raw.splits import assign_splits, check_no_cluster_crosses_split, read_freeze, validate_freeze
from autheval.reference_data import reference_path
from dagster_project.resources import LakeResource, SourceResource


def _without(table: pa.Table, ids: pa.ChunkedArray | pa.Array) -> pa.Table:
    return table.filter(pc.invert(pc.is_in(table.column("image_id"), value_set=pa.array(ids, pa.string()))))


@asset(group_name=DUPLICATES, kinds={"parquet"}, deps=[images, duplicates], description=(
    "image_id, cluster_id, split (+ base_node, duplicate_group, cluster_size, split_key, split_source): "
    "the evaluation clusters and their split; a cluster never crosses a split. For the reference study "
    "every frozen cluster id is re-derived and must match."))
def clusters(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    kept = store.read("images")
    for side, column in (("hash_failures", "image_id"), ("duplicate_removals", "removed_image_id")):
        if store.table_path(side).exists() and store.read(side).num_rows:
            kept = _without(kept, store.read(side).column(column).combine_chunks())
    dups = store.read("duplicates")
    groups = exact_groups(hashes_of_kind(store.read("image_hashes"), "autheval"))
    table = assign_clusters(kept, groups, union_groups(dups))
    freeze_path = str(reference_path("split_freeze")) if source.is_reference else source.freeze
    if freeze_path:
        splits = validate_freeze(read_freeze(freeze_path), table, source=freeze_path)
        split_of = dict(zip(splits.column("image_id").to_pylist(), splits.column("split").to_pylist()))
        split = pa.array([split_of[i] for i in table.column("image_id").to_pylist()], pa.string())
        origin = "frozen"
    else:
        split = assign_splits(table, kept).column("split")
        origin = "computed"
    table = table.append_column("split", split).append_column("split_source", pa.array([origin] * table.num_rows))
    check_no_cluster_crosses_split(table)
    return write_table(store, "clusters", table, {"split_source": origin},
                       n_clusters=len(set(table.column("cluster_id").to_pylist())), split_source=origin)


@asset_check(asset=clusters, description="image ids are unique")
def clusters_unique_ids(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "check_unique_images", [], {"checked": "clusters"})
    return AssetCheckResult(passed=row["duplicates"] == 0, metadata={k: str(v) for k, v in row.items()})


@asset_check(asset=clusters, description="no cluster crosses a split")
def clusters_within_one_split(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "check_cluster_splits", ["clusters"])
    return AssetCheckResult(passed=row["violations"] == 0, metadata={k: str(v) for k, v in row.items()})


@asset_check(asset=clusters, additional_deps=[images],
             description="cluster context (split, reference state) is constant within a cluster")
def clusters_context_constant(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "check_cluster_context", ["clusters", "images"])
    return AssetCheckResult(passed=row["violations"] == 0, metadata={k: str(v) for k, v in row.items()})
