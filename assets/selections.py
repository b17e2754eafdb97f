"""selections: what the local authority selected, per analysis (mechanism x review regime) and image."""

from __future__ import annotations

from dagster import AssetCheckSpec, ResourceParam, multi_asset_check

from assets.common import (
    REVIEW,
    check_result,
    connect_with,
    reference_table,
    ruled_connection,
    table_asset,
    write_table,
)
from assets.proposals import proposals
from assets.resources import DeclaredRules, LakeResource, SourceResource
from autheval.review.local_review import build_selections
from warehouse import sql


@table_asset(
    REVIEW,
    [proposals, "contexts", "clusters", "declared_rules"],
    "analysis, mechanism, regime, image_id, cluster_id, a_head, a_sel, change_type (none, "
    "down_substitution, up_substitution, fallback), override (patient_refusal, patient_burden, "
    "empty_band_default): the proposal and the action the local service selected under each review "
    "regime (mixed, capacity ceiling, safety floor). Raw cohorts: the declared local rules applied to "
    "every mechanism's slate; reference study: the published traces.",
)
def selections(lake: LakeResource, source: SourceResource, rules: ResourceParam[DeclaredRules]):
    store = lake.lake()
    if source.is_reference:
        table = reference_table(store, "review/selections_reference")
    else:
        con, params, _ = ruled_connection(store, rules, ["contexts", "clusters"])
        con.register("all_proposals", store.read("proposals"))
        con.register("proposals", sql.run(con, "proposals/evaluated_proposals"))
        build_selections(con, params)
        table = con.table("selections").arrow().read_all()
    changed = sum(1 for t in table.column("change_type").to_pylist() if t != "none")
    return write_table(store, "selections", table, changed_rows=changed)


@multi_asset_check(
    specs=[
        AssetCheckSpec(
            "selections_band_not_empty",
            asset="selections",
            blocking=True,
            description=(
                "every selection had a non-empty admissible band and a selected action (spec 3.8); not run, so "
                "shown as skipped, for the reference study's replayed traces"
            ),
        )
    ],
    can_subset=True,
)
def selections_band_not_empty(context, lake: LakeResource, source: SourceResource):
    if source.is_reference:
        context.log.info("selections_band_not_empty skipped: the reference selections are replayed traces")
        return
    row = sql.one(connect_with(lake.lake(), ["selections"]), "review/check_selections_band")
    yield check_result(row, "selections_band_not_empty")
