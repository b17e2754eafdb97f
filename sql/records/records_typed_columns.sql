-- The typed columns of the canonical record (a select list, filled as the {typed} fragment of
-- records/records_normalize.sql and records/records_dataset_canonical.sql): the intervention flag and the
-- three utilities as doubles, the proposal's local score filled on unchanged rows where it is missing
-- (same action, same rule, same score). Portable: Spark runs it too.
    CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR) AS intervened,
    TRY_CAST(utility_executed_local AS DOUBLE) AS utility_executed_local,
    CASE
        WHEN utility_proposed_local IS NULL
             AND CAST(proposed_action AS VARCHAR) = CAST(executed_action AS VARCHAR)
            THEN TRY_CAST(utility_executed_local AS DOUBLE)
        ELSE TRY_CAST(utility_proposed_local AS DOUBLE)
    END AS utility_proposed_local,
    TRY_CAST(utility_proposed_global AS DOUBLE) AS utility_proposed_global
