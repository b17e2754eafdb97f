"""duplicates: exact-hash groups and near-duplicate components at each declared Hamming threshold
(multi-index join in SQL), with their declared use: report, cluster (union) or drop; the images a
'drop' rule removes (duplicate_removals); and duplicate_report, the same components with their splits.
Steps 2 and 4 of autheval.raw.pipeline (find_duplicate_tables, duplicate_report)."""

from __future__ import annotations

import pyarrow.compute as pc
from dagster import AssetCheckResult, AssetCheckSpec, multi_asset, multi_asset_check

from assets.common import DUPLICATES, table_asset, table_spec, write_table
from assets.resources import LakeResource, SourceResource
from autheval.raw.duplicates import AUTHEVAL_RULES
from autheval.raw.pipeline import duplicate_report as report_with_splits
from autheval.raw.pipeline import find_duplicate_tables
from autheval.reference_data import reference_path

RULES = AUTHEVAL_RULES  # exact groups (always) + threshold 4, report only


@multi_asset(
    name="find_duplicates",
    specs=[
        table_spec(
            "duplicates",
            DUPLICATES,
            ["image_hashes"],
            "hash_kind, threshold, use, component_id, component_size, exact_group_id, image_id, image_hash: "
            "EXACT_PHASH_ groups and PHASH_ components (size desc, smallest id) of the readable images. "
            "Cross-split flags are in duplicate_report.",
        ),
        table_spec(
            "duplicate_removals",
            DUPLICATES,
            ["duplicates"],
            "removed_image_id, kept_image_id, component_id, hash_kind, threshold: the images a 'drop' rule "
            "removes (the smallest id of each component is kept); clusters leave them out.",
        ),
    ],
)
def find_duplicates(lake: LakeResource):
    store = lake.lake()
    table, dropped = find_duplicate_tables(store.read("image_hashes"), RULES)
    near = table.filter(pc.greater(table.column("threshold"), 0))
    yield write_table(
        store,
        "duplicates",
        table,
        asset_key="duplicates",
        exact_groups=len(set(table.filter(pc.equal(table.column("threshold"), 0)).column("component_id").to_pylist())),
        near_components=len(set(near.column("component_id").to_pylist())),
    )
    yield write_table(store, "duplicate_removals", dropped, asset_key="duplicate_removals")


@table_asset(
    DUPLICATES,
    ["duplicates", "clusters"],
    "The duplicates with their splits and component_crosses_split (AuthEval 1.8's report), from the "
    "duplicates table and the clusters' splits.",
)
def duplicate_report(lake: LakeResource):
    store = lake.lake()
    table = report_with_splits(store.read("duplicates"), store.read("clusters"))
    crossing = table.filter(pc.fill_null(table.column("component_crosses_split"), False))
    return write_table(
        store,
        "duplicate_report",
        table,
        components_crossing_splits=len(set(crossing.column("component_id").to_pylist())),
    )


@multi_asset_check(
    specs=[
        AssetCheckSpec(
            "duplicate_report_matches_published",
            asset="duplicate_report",
            description=(
                "reference source: the components, their numbering and split flags equal the published report "
                "(not run, so shown as skipped, for other sources)"
            ),
        )
    ],
    can_subset=True,
)
def duplicate_report_matches_published(context, lake: LakeResource, source: SourceResource):
    if not source.is_reference:
        context.log.info(f"duplicate_report_matches_published skipped: source {source.kind} has no published report")
        return
    import pyarrow.parquet as pq

    ours = lake.lake().read("duplicate_report")
    ours = ours.filter(pc.equal(ours.column("threshold"), 4))
    published = pq.read_table(reference_path("phash_duplicate_report"))

    def key(t):
        return sorted(
            zip(
                t.column("component_id").to_pylist(),
                t.column("image_id").to_pylist(),
                t.column("component_crosses_split").to_pylist(),
            )
        )

    same = key(ours) == key(published)
    yield AssetCheckResult(
        check_name="duplicate_report_matches_published",
        passed=same,
        metadata={
            "components": len(set(ours.column("component_id").to_pylist())),
            "images": ours.num_rows,
            "published_images": published.num_rows,
        },
    )
