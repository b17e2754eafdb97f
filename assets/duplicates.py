"""duplicates: exact-hash groups and near-duplicate components at each declared Hamming threshold
(multi-index join in SQL), with their declared use: report, cluster (union) or drop."""

from __future__ import annotations

import pyarrow.compute as pc
from dagster import AssetCheckResult, asset, asset_check

from assets.common import DUPLICATES, write_table
from assets.image_hashes import image_hashes
from autheval.raw.duplicates import AUTHEVAL_RULES, find_duplicates, removals
from autheval.reference_data import reference_path
from dagster_project.resources import LakeResource, SourceResource

RULES = AUTHEVAL_RULES  # exact groups (always) + threshold 4, report only


@asset(group_name=DUPLICATES, kinds={"parquet"}, deps=[image_hashes], description=(
    "hash_kind, threshold, use, component_id, component_size, exact_group_id, image_id, image_hash: "
    "EXACT_PHASH_ groups and PHASH_ components (size desc, smallest id); side table "
    "duplicate_removals for 'drop' rules. Cross-split flags are in duplicate_report."))
def duplicates(lake: LakeResource):
    store = lake.lake()
    table = find_duplicates(store.read("image_hashes"), RULES)
    store.write("duplicate_removals", removals(table))
    near = table.filter(pc.greater(table.column("threshold"), 0))
    return write_table(store, "duplicates", table,
                       exact_groups=len(set(table.filter(pc.equal(table.column("threshold"), 0)).column("component_id").to_pylist())),
                       near_components=len(set(near.column("component_id").to_pylist())))


@asset(group_name=DUPLICATES, kinds={"parquet"}, deps=[duplicates, "clusters"], description=(
    "The duplicates with their splits and component_crosses_split (AuthEval 1.8's report)."))
def duplicate_report(lake: LakeResource):
    store = lake.lake()
    table = find_duplicates(store.read("image_hashes"), RULES, splits=store.read("clusters").select(["image_id", "split"]))
    crossing = table.filter(table.column("component_crosses_split"))
    return write_table(store, "duplicate_report", table,
                       components_crossing_splits=len(set(crossing.column("component_id").to_pylist())))


@asset_check(asset=duplicate_report, description=(
    "reference source: the components, their numbering and split flags equal the published report"))
def duplicate_report_matches_published(lake: LakeResource, source: SourceResource) -> AssetCheckResult:
    if not source.is_reference:
        return AssetCheckResult(passed=True, metadata={"skipped": f"source {source.kind}"})
    import pyarrow.parquet as pq

    ours = lake.lake().read("duplicate_report")
    ours = ours.filter(pc.equal(ours.column("threshold"), 4))
    published = pq.read_table(reference_path("phash_duplicate_report"))
    key = lambda t: sorted(zip(t.column("component_id").to_pylist(), t.column("image_id").to_pylist(),  # noqa: E731
                               t.column("component_crosses_split").to_pylist()))
    same = key(ours) == key(published)
    return AssetCheckResult(passed=same, metadata={
        "components": len(set(ours.column("component_id").to_pylist())), "images": ours.num_rows,
        "published_images": published.num_rows})
