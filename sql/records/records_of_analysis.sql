-- One analysis's records in the AuthEval log schema, ready for the estimators.
-- Input: records; parameter $analysis.
SELECT case_id, cluster_id, proposed_action, executed_action, utility_executed_local,
       utility_proposed_local, utility_proposed_global
FROM records
WHERE analysis = $analysis
ORDER BY case_id
