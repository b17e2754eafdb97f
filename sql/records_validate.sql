-- Rule violations of a role-separated record: the first offending row per broken rule, in rule order.
-- One aggregate pass over the rows (plus one GROUP BY for duplicate ids), so memory stays flat for
-- large logs. Input: raw_records(row_index, case_id, cluster_id, proposed_action, executed_action,
-- utility_executed_local, utility_proposed_local, utility_proposed_global), any column types.
-- Output: rule_order, column_name, rule, row_index, case_id, bad_value, n_rows.
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
        TRY_CAST(utility_proposed_global AS DOUBLE) AS glob_value
    FROM raw_records
),
flagged AS (
    SELECT
        *,
        coalesce(proposed_action <> executed_action, false) AS changed,
        case_id IS NULL AS r1,
        cluster_id IS NULL AS r3,
        proposed_action IS NULL AS r4,
        executed_action IS NULL AS r5,
        exec_text IS NULL AS r6,
        exec_text IS NOT NULL AND NOT coalesce(isfinite(exec_value), false) AS r7,
        prop_text IS NOT NULL AND NOT coalesce(isfinite(prop_value), false) AS r8,
        glob_text IS NOT NULL AND NOT coalesce(isfinite(glob_value), false) AS r9,
        proposed_action = executed_action AND coalesce(isfinite(prop_value) AND isfinite(exec_value)
            AND abs(prop_value - exec_value) > 1e-12, false) AS r10
    FROM typed
),
agg AS (
    SELECT
        count(*) FILTER (WHERE executed_action IS NOT NULL) AS rows_with_executed,
        count(*) FILTER (WHERE changed AND prop_text IS NOT NULL) AS changed_with_prop,
        count(*) FILTER (WHERE glob_text IS NOT NULL) AS rows_with_glob,
        count(*) FILTER (WHERE r1) AS n1, min(row_index) FILTER (WHERE r1) AS i1,
        count(*) FILTER (WHERE r3) AS n3, min(row_index) FILTER (WHERE r3) AS i3,
        arg_min(case_id, row_index) FILTER (WHERE r3) AS c3,
        count(*) FILTER (WHERE r4) AS n4, min(row_index) FILTER (WHERE r4) AS i4,
        arg_min(case_id, row_index) FILTER (WHERE r4) AS c4,
        count(*) FILTER (WHERE r5) AS n5, min(row_index) FILTER (WHERE r5) AS i5,
        arg_min(case_id, row_index) FILTER (WHERE r5) AS c5,
        count(*) FILTER (WHERE r6) AS n6, min(row_index) FILTER (WHERE r6) AS i6,
        arg_min(case_id, row_index) FILTER (WHERE r6) AS c6,
        count(*) FILTER (WHERE r7) AS n7, min(row_index) FILTER (WHERE r7) AS i7,
        arg_min(case_id, row_index) FILTER (WHERE r7) AS c7,
        arg_min(exec_text, row_index) FILTER (WHERE r7) AS v7,
        count(*) FILTER (WHERE r8) AS n8, min(row_index) FILTER (WHERE r8) AS i8,
        arg_min(case_id, row_index) FILTER (WHERE r8) AS c8,
        arg_min(prop_text, row_index) FILTER (WHERE r8) AS v8,
        count(*) FILTER (WHERE r9) AS n9, min(row_index) FILTER (WHERE r9) AS i9,
        arg_min(case_id, row_index) FILTER (WHERE r9) AS c9,
        arg_min(glob_text, row_index) FILTER (WHERE r9) AS v9,
        count(*) FILTER (WHERE r10) AS n10, min(row_index) FILTER (WHERE r10) AS i10,
        arg_min(case_id, row_index) FILTER (WHERE r10) AS c10,
        arg_min(prop_text || ' vs ' || exec_text, row_index) FILTER (WHERE r10) AS v10,
        count(*) FILTER (WHERE changed AND prop_text IS NULL) AS n11,
        min(row_index) FILTER (WHERE changed AND prop_text IS NULL) AS i11,
        arg_min(case_id, row_index) FILTER (WHERE changed AND prop_text IS NULL) AS c11,
        count(*) FILTER (WHERE glob_text IS NULL) AS n12,
        min(row_index) FILTER (WHERE glob_text IS NULL) AS i12,
        arg_min(case_id, row_index) FILTER (WHERE glob_text IS NULL) AS c12,
        -- overflow: sums of |values| times the row count bound every point and replicate sum (a
        -- replicate draws at most rows clusters, 11x for poisson weights, 2x for differences)
        count(*) AS n_all,
        sum(abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS abs13,
        arg_max(row_index, abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS i13,
        arg_max(case_id, abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS c13,
        arg_max(exec_text, abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS v13,
        sum(abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS abs14,
        arg_max(row_index, abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS i14,
        arg_max(case_id, abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS c14,
        arg_max(prop_text, abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS v14,
        sum(abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS abs15,
        arg_max(row_index, abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS i15,
        arg_max(case_id, abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS c15,
        arg_max(glob_text, abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS v15
    FROM flagged
),
duplicates AS (
    -- straight from the input: a CTE used twice would be materialized whole
    SELECT CAST(case_id AS VARCHAR) AS case_id, min(row_index) AS first_row, count(*) AS n
    FROM raw_records
    WHERE case_id IS NOT NULL
    GROUP BY CAST(case_id AS VARCHAR)
    HAVING count(*) > 1
),
dup AS (
    SELECT coalesce(sum(n), 0) AS n2, arg_min(case_id, first_row) AS c2, min(first_row) AS i2
    FROM duplicates
),
violations AS (
    SELECT 1 AS rule_order, 'case_id' AS column_name, 'must not be empty' AS rule,
           i1 AS row_index, CAST(NULL AS VARCHAR) AS case_id, CAST(NULL AS VARCHAR) AS bad_value,
           n1 AS n_rows
    FROM agg WHERE n1 > 0
    UNION ALL
    SELECT 2, 'case_id', 'must be unique', i2, c2, c2, n2 FROM dup WHERE n2 > 0
    UNION ALL
    SELECT 3, 'cluster_id', 'must not be empty', i3, c3, NULL, n3 FROM agg WHERE n3 > 0
    UNION ALL
    SELECT 4, 'proposed_action', 'must not be empty', i4, c4, NULL, n4 FROM agg WHERE n4 > 0
    UNION ALL
    -- a record with no selection at all is proposal-only, not broken
    SELECT 5, 'executed_action', 'must not be empty', i5, c5, NULL, n5
    FROM agg WHERE n5 > 0 AND rows_with_executed > 0
    UNION ALL
    SELECT 6, 'utility_executed_local', 'must not be empty', i6, c6, NULL, n6
    FROM agg WHERE n6 > 0 AND rows_with_executed > 0
    UNION ALL
    SELECT 7, 'utility_executed_local', 'must be a finite number', i7, c7, v7, n7 FROM agg WHERE n7 > 0
    UNION ALL
    SELECT 8, 'utility_proposed_local', 'must be a finite number', i8, c8, v8, n8 FROM agg WHERE n8 > 0
    UNION ALL
    SELECT 9, 'utility_proposed_global', 'must be a finite number', i9, c9, v9, n9 FROM agg WHERE n9 > 0
    UNION ALL
    SELECT 10, 'utility_proposed_local',
           'identical actions must have identical scores (proposed equals executed, scores differ)',
           i10, c10, v10, n10
    FROM agg WHERE n10 > 0
    UNION ALL
    SELECT 11, 'utility_proposed_local',
           'must be given on every changed row or on none (present on some changed rows, missing here)',
           i11, c11, NULL, n11
    FROM agg WHERE n11 > 0 AND changed_with_prop > 0
    UNION ALL
    SELECT 12, 'utility_proposed_global', 'must be given on every row or on none (missing here)',
           i12, c12, NULL, n12
    FROM agg WHERE n12 > 0 AND rows_with_glob > 0
    UNION ALL
    SELECT 13, 'utility_executed_local', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i13, c13, v13, 1
    FROM agg WHERE NOT abs13 * n_all < 1e306
    UNION ALL
    SELECT 14, 'utility_proposed_local', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i14, c14, v14, 1
    FROM agg WHERE NOT abs14 * n_all < 1e306
    UNION ALL
    SELECT 15, 'utility_proposed_global', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i15, c15, v15, 1
    FROM agg WHERE NOT abs15 * n_all < 1e306
)
SELECT * FROM violations ORDER BY rule_order
