-- Rule violations of a role-separated record: the first offending row per broken rule, in rule order.
-- One aggregate pass over the rows on numbers and null flags only (no text is made of any value:
-- casting 30M doubles to text took most of a 10M-row read), plus one GROUP BY on a 64-bit hash of the
-- ids. A hash repeated is a candidate duplicate (rule 2, row_index NULL): the caller confirms it on the
-- ids themselves (records/records_duplicates.sql). The reported row's id and bad value come from
-- records/records_violation_detail.sql, so a valid file never formats a value.
-- The rows' flags ({flags}) are records/records_rule_flags.sql's. Run only where records/records_check.sql
-- found a rule broken (or an id hash repeated): a valid record is checked by that one cheaper pass.
-- Input: raw_records(row_index, case_id, cluster_id, proposed_action, executed_action,
-- utility_executed_local, utility_proposed_local, utility_proposed_global), of the types
-- autheval.records.schema.check_column_types allows.
-- Output: rule_order, column_name, rule, row_index, n_rows.
WITH {flags},
agg AS (
    SELECT
        count(*) FILTER (WHERE NOT no_executed) AS rows_with_executed,
        count(*) FILTER (WHERE changed AND NOT no_prop) AS changed_with_prop,
        count(*) FILTER (WHERE NOT no_glob) AS rows_with_glob,
        count(*) FILTER (WHERE r1) AS n1, min(row_index) FILTER (WHERE r1) AS i1,
        count(*) FILTER (WHERE r3) AS n3, min(row_index) FILTER (WHERE r3) AS i3,
        count(*) FILTER (WHERE r4) AS n4, min(row_index) FILTER (WHERE r4) AS i4,
        count(*) FILTER (WHERE r5) AS n5, min(row_index) FILTER (WHERE r5) AS i5,
        count(*) FILTER (WHERE r6) AS n6, min(row_index) FILTER (WHERE r6) AS i6,
        count(*) FILTER (WHERE r7) AS n7, min(row_index) FILTER (WHERE r7) AS i7,
        count(*) FILTER (WHERE r8) AS n8, min(row_index) FILTER (WHERE r8) AS i8,
        count(*) FILTER (WHERE r9) AS n9, min(row_index) FILTER (WHERE r9) AS i9,
        count(*) FILTER (WHERE r10) AS n10, min(row_index) FILTER (WHERE r10) AS i10,
        count(*) FILTER (WHERE changed AND no_prop) AS n11,
        min(row_index) FILTER (WHERE changed AND no_prop) AS i11,
        count(*) FILTER (WHERE no_glob) AS n12,
        min(row_index) FILTER (WHERE no_glob) AS i12,
        -- overflow: sums of |values| times the row count bound every point and replicate sum (a
        -- replicate draws at most rows clusters, 11x for poisson weights, 2x for differences)
        count(*) AS n_all,
        sum(abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS abs13,
        arg_max(row_index, abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS i13,
        sum(abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS abs14,
        arg_max(row_index, abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS i14,
        sum(abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS abs15,
        arg_max(row_index, abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS i15
    FROM flagged
),
spaced_agg AS (
    SELECT
        count(*) FILTER (WHERE ws_case) AS n16, min(row_index) FILTER (WHERE ws_case) AS i16,
        count(*) FILTER (WHERE ws_cluster) AS n17, min(row_index) FILTER (WHERE ws_cluster) AS i17,
        count(*) FILTER (WHERE ws_proposed) AS n18, min(row_index) FILTER (WHERE ws_proposed) AS i18,
        count(*) FILTER (WHERE ws_executed) AS n19, min(row_index) FILTER (WHERE ws_executed) AS i19
    FROM flagged
),
violations AS (
    SELECT 1 AS rule_order, 'case_id' AS column_name, 'must not be empty' AS rule,
           i1 AS row_index, n1 AS n_rows
    FROM agg WHERE n1 > 0
    UNION ALL
    SELECT 2, 'case_id', 'must be unique', NULL, n FROM repeated_hashes WHERE n > 0
    UNION ALL
    SELECT 3, 'cluster_id', 'must not be empty', i3, n3 FROM agg WHERE n3 > 0
    UNION ALL
    SELECT 4, 'proposed_action', 'must not be empty', i4, n4 FROM agg WHERE n4 > 0
    UNION ALL
    -- a record with no selection at all is proposal-only, not broken
    SELECT 5, 'executed_action', 'must not be empty', i5, n5
    FROM agg WHERE n5 > 0 AND rows_with_executed > 0
    UNION ALL
    SELECT 6, 'utility_executed_local', 'must not be empty', i6, n6
    FROM agg WHERE n6 > 0 AND rows_with_executed > 0
    UNION ALL
    SELECT 7, 'utility_executed_local', 'must be a finite number', i7, n7 FROM agg WHERE n7 > 0
    UNION ALL
    SELECT 8, 'utility_proposed_local', 'must be a finite number', i8, n8 FROM agg WHERE n8 > 0
    UNION ALL
    SELECT 9, 'utility_proposed_global', 'must be a finite number', i9, n9 FROM agg WHERE n9 > 0
    UNION ALL
    SELECT 10, 'utility_proposed_local',
           'identical actions must have identical scores (proposed equals executed, scores differ)',
           i10, n10
    FROM agg WHERE n10 > 0
    UNION ALL
    SELECT 11, 'utility_proposed_local',
           'must be given on every changed row or on none (present on some changed rows, missing here)',
           i11, n11
    FROM agg WHERE n11 > 0 AND changed_with_prop > 0
    UNION ALL
    SELECT 12, 'utility_proposed_global', 'must be given on every row or on none (missing here)',
           i12, n12
    FROM agg WHERE n12 > 0 AND rows_with_glob > 0
    UNION ALL
    SELECT 13, 'utility_executed_local', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i13, 1
    FROM agg WHERE NOT abs13 * n_all < 1e306
    UNION ALL
    SELECT 14, 'utility_proposed_local', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i14, 1
    FROM agg WHERE NOT abs14 * n_all < 1e306
    UNION ALL
    SELECT 15, 'utility_proposed_global', 'values so large that sums overflow to infinity: the sum of '
           || '|values| times the number of rows must stay below 1e306; the largest value', i15, 1
    FROM agg WHERE NOT abs15 * n_all < 1e306
    UNION ALL
    SELECT 16, 'case_id', 'must not be blank or begin or end with whitespace (it would count apart from the '
           || 'same id without it)', i16, n16 FROM spaced_agg WHERE n16 > 0
    UNION ALL
    SELECT 17, 'cluster_id', 'must not be blank or begin or end with whitespace (it would count as another '
           || 'cluster than the same id without it)', i17, n17 FROM spaced_agg WHERE n17 > 0
    UNION ALL
    SELECT 18, 'proposed_action', 'must not be blank or begin or end with whitespace (''a1 '' and ''a1'' would '
           || 'count as different actions)', i18, n18 FROM spaced_agg WHERE n18 > 0
    UNION ALL
    SELECT 19, 'executed_action', 'must not be blank or begin or end with whitespace (''a1 '' and ''a1'' would '
           || 'count as different actions: a false intervention)', i19, n19 FROM spaced_agg WHERE n19 > 0
)
SELECT * FROM violations ORDER BY rule_order
