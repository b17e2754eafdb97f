"""contexts: the private, cluster-shared context of the simulated local review (AuthEval spec 3.2-3.5)
under the declared local rules: profile, mean gate score and its risk bin, the three private factors,
capacity and floor. Private: never copied into an exported record. The SQL is autheval/review/local_review.py's."""

from __future__ import annotations

from dagster import AssetCheckResult, ResourceParam, asset_check

from assets.common import CONTEXT, check_result, connect_with, ruled_connection, table_asset, write_ruled
from assets.resources import DeclaredRules, LakeResource, SourceResource
from autheval.review.local_review import build_contexts
from warehouse import sql


@table_asset(
    CONTEXT,
    ["images", "clusters", "gate_proxy", "declared_rules"],
    "cluster_id, profile, s_gate, risk_bin, sens, burden, aversion, capacity, floor_policy, floor, "
    "w_under, w_over, rule_version, rule_sha256: one row per evaluated cluster (private, local).",
)
def contexts(lake: LakeResource, source: SourceResource, rules: ResourceParam[DeclaredRules]):
    source.require_raw("contexts")
    store = lake.lake()
    con, params, rule_file = ruled_connection(store, rules, ["images", "clusters", "gate_proxy"])
    con.register("s_gate", sql.run(con, "context/evaluated_gate_scores", {"split": source.evaluate_split}))
    build_contexts(con, params)
    table = con.table("contexts").arrow().read_all()
    return write_ruled(store, "contexts", table, rule_file, evaluated_split=source.evaluate_split)


@asset_check(asset=contexts, blocking=True, description="every evaluated cluster has a profile and a gate score")
def contexts_complete(lake: LakeResource) -> AssetCheckResult:
    con = connect_with(lake.lake(), ["contexts"])
    row = sql.one(con, "context/check_contexts_complete")
    return check_result(row)
