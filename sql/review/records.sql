-- records: the role-separated record of every analysis in the AuthEval log schema, with its record
-- level. Input: selections, scores, clusters.
SELECT
    s.analysis,
    s.study,
    s.mechanism,
    s.regime,
    s.image_id AS case_id,
    c.cluster_id,
    s.a_head AS proposed_action,
    s.a_sel AS executed_action,
    sc.u_local_sel AS utility_executed_local,
    sc.u_local_head AS utility_proposed_local,
    sc.u_global_head AS utility_proposed_global,
    CASE
        WHEN sc.u_local_head IS NOT NULL THEN 'full_counterfactual'
        WHEN sc.u_local_sel IS NOT NULL THEN 'role_separated'
        ELSE 'proposal_only'
    END AS record_level
FROM selections AS s
JOIN scores AS sc USING (analysis, image_id)
JOIN clusters AS c USING (image_id)
ORDER BY s.analysis, s.image_id
