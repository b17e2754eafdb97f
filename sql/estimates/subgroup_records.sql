-- One group's records in the AuthEval log schema, for the estimators.
-- Input: subgroup_members; parameters $analysis, $grouping, $group_value.
SELECT case_id, cluster_id, proposed_action, executed_action, utility_executed_local,
       utility_proposed_local, utility_proposed_global
FROM subgroup_members
WHERE analysis = $analysis AND grouping = $grouping AND group_value = $group_value
ORDER BY case_id
