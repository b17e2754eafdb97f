-- The canonical role-separated record: typed columns, the intervention flag, and the proposal's
-- local score filled on unchanged rows where it is missing (same action, same rule, same score).
-- Input: raw_records (validated); parameter $analysis (the analysis label).
SELECT
    CAST($analysis AS VARCHAR) AS analysis,
    row_index,
    CAST(case_id AS VARCHAR) AS case_id,
    CAST(cluster_id AS VARCHAR) AS cluster_id,
    CAST(proposed_action AS VARCHAR) AS proposed_action,
    CAST(executed_action AS VARCHAR) AS executed_action,
    CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR) AS intervened,
    TRY_CAST(utility_executed_local AS DOUBLE) AS utility_executed_local,
    CASE
        WHEN utility_proposed_local IS NULL
             AND CAST(proposed_action AS VARCHAR) = CAST(executed_action AS VARCHAR)
            THEN TRY_CAST(utility_executed_local AS DOUBLE)
        ELSE TRY_CAST(utility_proposed_local AS DOUBLE)
    END AS utility_proposed_local,
    TRY_CAST(utility_proposed_global AS DOUBLE) AS utility_proposed_global
FROM raw_records
