-- Every landed case to date as one log: case ids are qualified by the landed file (two files may
-- reuse an id); clusters keep their ids, so a lesion seen in several periods stays one cluster.
-- Input: landed_records; parameter $period (NULL = all periods).
SELECT
    landed_file || '/' || case_id AS case_id,
    cluster_id,
    proposed_action,
    executed_action,
    utility_executed_local,
    utility_proposed_local,
    utility_proposed_global
FROM landed_records
WHERE $period IS NULL OR period = $period
ORDER BY landed_file, row_index
