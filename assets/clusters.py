"""clusters: each image's lesion-aware cluster (patient / lesion id united with exact image hashes and
any threshold-k 'cluster' components; AuthEval-compatible ids) and its split (a frozen split,
validated, or AuthEval's split algorithm). Step 3 of autheval.raw.pipeline (cluster_images)."""

from __future__ import annotations

from dagster import AssetCheckResult, asset_check

from assets.common import DUPLICATES, check_result, check_row, table_asset, write_table
from assets.resources import LakeResource, SourceResource
from autheval.raw.pipeline import cluster_images
from autheval.reference_data import reference_path


@table_asset(
    DUPLICATES,
    ["images", "image_hashes", "duplicates", "duplicate_removals"],
    "image_id, cluster_id, split (+ base_node, duplicate_group, cluster_size, split_key, split_source): "
    "the evaluation clusters and their split; a cluster never crosses a split. For the reference study "
    "every frozen cluster id is re-derived and must match.",
)
def clusters(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    freeze = str(reference_path("split_freeze")) if source.is_reference else source.freeze or None
    table = cluster_images(
        store.read("images"),
        store.read("image_hashes"),
        store.read("duplicates"),
        store.read("duplicate_removals"),
        freeze=freeze,
    )
    origin = "frozen" if freeze else "computed"
    return write_table(
        store,
        "clusters",
        table,
        {"split_source": origin},
        n_clusters=len(set(table.column("cluster_id").to_pylist())),
        split_source=origin,
    )


@asset_check(asset=clusters, description="image ids are unique")
def clusters_unique_ids(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "ingest/check_unique_images", [], {"checked": "clusters"})
    return AssetCheckResult(passed=row["duplicates"] == 0, metadata={k: str(v) for k, v in row.items()})


@asset_check(asset=clusters, description="no cluster crosses a split")
def clusters_within_one_split(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "duplicates/check_cluster_splits", ["clusters"])
    return check_result(row)


@asset_check(
    asset=clusters,
    additional_deps=["images"],
    description="cluster context (split, reference state) is constant within a cluster",
)
def clusters_context_constant(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "context/check_cluster_context", ["clusters", "images"])
    return check_result(row)
