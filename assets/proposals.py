"""proposals: each mechanism's proposed action per image (the head of its ranked slate)."""

from __future__ import annotations

import pyarrow.parquet as pq
from dagster import AssetCheckResult, asset, asset_check

from assets.common import PROPOSALS, check_row, connect_with, query, write_table
from assets.reference import register_reference
from autheval.reference_data import reference_path
from dagster_project.resources import LakeResource, SourceResource


@asset(group_name=PROPOSALS, kinds={"parquet"}, deps=["images"], description=(
    "mechanism, policy_id, image_id, slate_size, a_head: what each proposal mechanism (MedGemma "
    "readout, LLaVA-Med head, CLIP probe) proposed for each test image."))
def proposals(lake: LakeResource, source: SourceResource):
    source.require_reference("proposals")
    table = query(register_reference(connect_with(lake.lake())), "proposals")
    return write_table(lake.lake(), "proposals", table,
                       mechanisms=", ".join(sorted(set(table.column("mechanism").to_pylist()))))


@asset_check(asset=proposals, description="the control heads equal the study's frozen heads")
def proposals_match_frozen_heads(lake: LakeResource) -> AssetCheckResult:
    frozen = pq.read_table(reference_path("frozen_proposal_heads"))
    row = check_row(lake.lake(), "check_frozen_heads", ["proposals"], extra={"frozen_heads": frozen})
    return AssetCheckResult(passed=row["violations"] == 0, metadata={k: str(v) for k, v in row.items()})
