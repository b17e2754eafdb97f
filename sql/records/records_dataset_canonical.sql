-- The canonical record of a dataset, row for row: the analysis label, row_index, the id and action
-- columns as text and the typed part (the intervention flag, the three utilities as doubles, the
-- proposal's local score filled on unchanged rows where it is missing: same action, same rule, same
-- score). Twin: records/records_normalize.sql, the same typed expressions for records held in memory (whose
-- text columns are taken from the input as they are). {raw} is a checked identifier filled by
-- autheval/records/registration.py: the validated raw_records layout of one dataset. Portable: Spark runs it over
-- the files it reads itself (autheval/estimation/engine_estimates.py).
SELECT
    analysis,
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
FROM {raw}
