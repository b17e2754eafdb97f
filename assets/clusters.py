"""clusters: each image's lesion-aware cluster (lesion id united with exact image hashes) and split."""

from __future__ import annotations

from dagster import AssetCheckResult, asset, asset_check

from assets.common import INGEST, check_row, connect_with, query, write_table
from assets.images import images
from assets.reference import register_reference
from dagster_project.resources import LakeResource


@asset(group_name=INGEST, kinds={"parquet"}, deps=[images], description=(
    "image_id, cluster_id, split: the evaluation clusters (AuthEval-compatible ids) and the split "
    "they belong to; a cluster never crosses a split."))
def clusters(lake: LakeResource):
    table = query(register_reference(connect_with(lake.lake())), "clusters")
    return write_table(lake.lake(), "clusters", table,
                       n_clusters=len(set(table.column("cluster_id").to_pylist())))


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
