-- review_records: every analysis (mechanism x review regime) as a role-separated record in the
-- AuthEval log layout (case_id = image_id, proposed = the slate head, executed = the selection), at
-- the full-counterfactual level (the proposal's local score is on every row), ready for
-- autheval.records.read.records_from_table and the estimators. The private context is not copied.
-- Input: scored_selections. No parameters.
SELECT
    analysis,
    mechanism,
    regime,
    image_id AS case_id,
    cluster_id,
    a_head AS proposed_action,
    a_sel AS executed_action,
    u_local_sel AS utility_executed_local,
    u_local_head AS utility_proposed_local,
    u_global_head AS utility_proposed_global,
    rule_version,
    rule_sha256
FROM scored_selections
