-- Rule violations of a role-separated record, first offending row per rule.
-- Input: raw_records(row_index, case_id, cluster_id, proposed_action, executed_action,
--        utility_executed_local, utility_proposed_local, utility_proposed_global), any column types.
-- Output: one row per broken rule, in rule order: rule_order, column_name, rule, row_index,
--         case_id, bad_value, n_rows (how many rows break it).
WITH typed AS (
    SELECT
        row_index,
        CAST(case_id AS VARCHAR) AS case_id,
        CAST(cluster_id AS VARCHAR) AS cluster_id,
        CAST(proposed_action AS VARCHAR) AS proposed_action,
        CAST(executed_action AS VARCHAR) AS executed_action,
        CAST(utility_executed_local AS VARCHAR) AS exec_text,
        CAST(utility_proposed_local AS VARCHAR) AS prop_text,
        CAST(utility_proposed_global AS VARCHAR) AS glob_text,
        TRY_CAST(utility_executed_local AS DOUBLE) AS exec_value,
        TRY_CAST(utility_proposed_local AS DOUBLE) AS prop_value,
        TRY_CAST(utility_proposed_global AS DOUBLE) AS glob_value,
        count(*) OVER (PARTITION BY CAST(case_id AS VARCHAR)) AS case_id_count
    FROM raw_records
),
flagged AS (
    SELECT
        *,
        proposed_action IS NOT NULL AND executed_action IS NOT NULL
            AND proposed_action <> executed_action AS changed
    FROM typed
),
totals AS (
    SELECT
        count(*) FILTER (WHERE changed AND prop_text IS NOT NULL) AS changed_with_prop,
        count(*) FILTER (WHERE changed AND prop_text IS NULL) AS changed_without_prop,
        count(*) FILTER (WHERE glob_text IS NOT NULL) AS rows_with_glob,
        count(*) FILTER (WHERE glob_text IS NULL) AS rows_without_glob,
        count(*) FILTER (WHERE executed_action IS NOT NULL) AS rows_with_executed
    FROM flagged
),
violations AS (
    SELECT 1 AS rule_order, 'case_id' AS column_name, 'must not be empty' AS rule,
           row_index, case_id, NULL AS bad_value FROM flagged WHERE case_id IS NULL
    UNION ALL
    SELECT 2, 'case_id', 'must be unique', row_index, case_id, case_id
    FROM flagged WHERE case_id IS NOT NULL AND case_id_count > 1
    UNION ALL
    SELECT 3, 'cluster_id', 'must not be empty', row_index, case_id, NULL
    FROM flagged WHERE cluster_id IS NULL
    UNION ALL
    SELECT 4, 'proposed_action', 'must not be empty', row_index, case_id, NULL
    FROM flagged WHERE proposed_action IS NULL
    UNION ALL
    -- a record with no selection at all is proposal-only, not broken
    SELECT 5, 'executed_action', 'must not be empty', row_index, case_id, NULL
    FROM flagged, totals WHERE executed_action IS NULL AND totals.rows_with_executed > 0
    UNION ALL
    SELECT 6, 'utility_executed_local', 'must not be empty', row_index, case_id, NULL
    FROM flagged, totals WHERE exec_text IS NULL AND totals.rows_with_executed > 0
    UNION ALL
    SELECT 7, 'utility_executed_local', 'must be a finite number', row_index, case_id, exec_text
    FROM flagged WHERE exec_text IS NOT NULL AND (exec_value IS NULL OR NOT isfinite(exec_value))
    UNION ALL
    SELECT 8, 'utility_proposed_local', 'must be a finite number', row_index, case_id, prop_text
    FROM flagged WHERE prop_text IS NOT NULL AND (prop_value IS NULL OR NOT isfinite(prop_value))
    UNION ALL
    SELECT 9, 'utility_proposed_global', 'must be a finite number', row_index, case_id, glob_text
    FROM flagged WHERE glob_text IS NOT NULL AND (glob_value IS NULL OR NOT isfinite(glob_value))
    UNION ALL
    SELECT 10, 'utility_proposed_local',
           'identical actions must have identical scores (proposed equals executed, scores differ)',
           row_index, case_id, prop_text || ' vs ' || exec_text
    FROM flagged
    WHERE proposed_action = executed_action
      AND isfinite(prop_value) AND isfinite(exec_value)
      AND abs(prop_value - exec_value) > 1e-12
    UNION ALL
    SELECT 11, 'utility_proposed_local',
           'must be given on every changed row or on none (present on some changed rows, missing here)',
           row_index, case_id, NULL
    FROM flagged, totals
    WHERE changed AND prop_text IS NULL AND totals.changed_with_prop > 0
    UNION ALL
    SELECT 12, 'utility_proposed_global', 'must be given on every row or on none (missing here)',
           row_index, case_id, NULL
    FROM flagged, totals
    WHERE glob_text IS NULL AND totals.rows_with_glob > 0
)
SELECT
    rule_order,
    column_name,
    rule,
    min(row_index) AS row_index,
    arg_min(case_id, row_index) AS case_id,
    arg_min(bad_value, row_index) AS bad_value,
    count(*) AS n_rows
FROM violations
GROUP BY rule_order, column_name, rule
ORDER BY rule_order
