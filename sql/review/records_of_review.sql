-- The lake's `records` for a raw cohort: every analysis (mechanism x review regime) of the `scores`
-- table in the AuthEval log layout (case_id = image_id, proposed = the slate head, executed = the
-- selection), with the study it belongs to (the review regime: mechanisms are compared within a
-- regime) and its record level (the simulated review scores the proposal locally on every row: full
-- counterfactual). The private context is not copied. Input: selections, scores (the review's).
SELECT
    s.analysis,
    s.regime AS study,
    s.mechanism,
    s.regime,
    s.image_id AS case_id,
    s.cluster_id,
    s.a_head AS proposed_action,
    s.a_sel AS executed_action,
    sc.u_local_sel AS utility_executed_local,
    sc.u_local_head AS utility_proposed_local,
    sc.u_global_head AS utility_proposed_global,
    'full_counterfactual' AS record_level,
    sc.rule_version,
    sc.rule_sha256
FROM selections AS s
JOIN scores AS sc USING (analysis, image_id)
ORDER BY s.analysis, case_id
