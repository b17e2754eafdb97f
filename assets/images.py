"""images: one row per image (ids, lesion, metadata, reference state, source)."""

from __future__ import annotations

from dagster import AssetCheckResult, asset, asset_check

from assets.common import INGEST, check_row, connect_with, query, write_table
from assets.reference import register_reference
from dagster_project.resources import LakeResource


@asset(group_name=INGEST, kinds={"parquet"}, description=(
    "Every image of the study: image_id, lesion_id, patient_id, metadata, risk stratum (the reference "
    "state; for the reference study recovered from the proposal's rule-known global score), source."))
def images(lake: LakeResource):
    con = register_reference(connect_with(lake.lake()))
    table = query(con, "images")
    return write_table(lake.lake(), "images", table, {"source": "isic2019_reference"},
                       images_with_reference_state=len(table.column("risk_stratum").drop_null()))


@asset_check(asset=images, description="image ids are unique")
def images_unique_ids(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "check_unique_images", [], {"checked": "images"})
    return AssetCheckResult(passed=row["duplicates"] == 0, metadata={k: str(v) for k, v in row.items()})
