-- Rule violations of a role-separated record: the first offending row per broken rule, in rule order.
-- One aggregate pass over the rows on numbers and null flags only (no text is made of any value:
-- casting 30M doubles to text took most of a 10M-row read), plus one GROUP BY on a 64-bit hash of the
-- ids. A hash repeated is a candidate duplicate (rule 2, row_index NULL): the caller confirms it on the
-- ids themselves (records/records_duplicates.sql). The reported row's id and bad value come from
-- records/records_violation_detail.sql, so a valid file never formats a value.
-- Ids and actions must not begin or end with whitespace (rules 16-19): `a1 ` and `a1` would count as
-- different actions (a false intervention), `k1 ` as another cluster. Refused, never stripped: the
-- record is what the service logged. Checked on text columns only (typeof folds when the query is
-- bound: an integer id column costs nothing) in a pass of its own, by comparisons and suffix tests (a
-- regex cost 4x more): a leading character below '!' (any ASCII space or control character; also a
-- blank id) or a no-break space, a trailing space, tab, line break or no-break space.
-- Input: raw_records(row_index, case_id, cluster_id, proposed_action, executed_action,
-- utility_executed_local, utility_proposed_local, utility_proposed_global), of the types
-- autheval.records.schema.check_column_types allows.
-- Output: rule_order, column_name, rule, row_index, n_rows.
WITH typed AS (
    SELECT
        row_index,
        case_id IS NULL AS no_case,
        cluster_id IS NULL AS no_cluster,
        proposed_action IS NULL AS no_proposed,
        executed_action IS NULL AS no_executed,
        utility_executed_local IS NULL AS no_exec,
        utility_proposed_local IS NULL AS no_prop,
        utility_proposed_global IS NULL AS no_glob,
        coalesce(CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR), false) AS changed,
        coalesce(CAST(proposed_action AS VARCHAR) = CAST(executed_action AS VARCHAR), false) AS same,
        TRY_CAST(utility_executed_local AS DOUBLE) AS exec_value,
        TRY_CAST(utility_proposed_local AS DOUBLE) AS prop_value,
        TRY_CAST(utility_proposed_global AS DOUBLE) AS glob_value
    FROM raw_records
),
flagged AS (
    SELECT
        *,
        no_case AS r1,
        no_cluster AS r3,
        no_proposed AS r4,
        no_executed AS r5,
        no_exec AS r6,
        NOT no_exec AND NOT coalesce(isfinite(exec_value), false) AS r7,
        NOT no_prop AND NOT coalesce(isfinite(prop_value), false) AS r8,
        NOT no_glob AND NOT coalesce(isfinite(glob_value), false) AS r9,
        same AND coalesce(isfinite(prop_value) AND isfinite(exec_value)
            AND abs(prop_value - exec_value) > 1e-12, false) AS r10
    FROM typed
),
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
texts AS (  -- the id and action columns that are text; NULL (a constant) for other types
    SELECT
        row_index,
        CASE WHEN typeof(case_id) = 'VARCHAR' THEN CAST(case_id AS VARCHAR) END AS case_text,
        CASE WHEN typeof(cluster_id) = 'VARCHAR' THEN CAST(cluster_id AS VARCHAR) END AS cluster_text,
        CASE WHEN typeof(proposed_action) = 'VARCHAR' THEN CAST(proposed_action AS VARCHAR) END AS proposed_text,
        CASE WHEN typeof(executed_action) = 'VARCHAR' THEN CAST(executed_action AS VARCHAR) END AS executed_text
    FROM raw_records
),
spaced AS (
    SELECT
        coalesce(case_text < '!' OR prefix(case_text, chr(160)) OR suffix(case_text, ' ') OR suffix(case_text, chr(9))
            OR suffix(case_text, chr(10)) OR suffix(case_text, chr(13)) OR suffix(case_text, chr(160)), false) AS ws_case,
        coalesce(cluster_text < '!' OR prefix(cluster_text, chr(160)) OR suffix(cluster_text, ' ') OR suffix(cluster_text, chr(9))
            OR suffix(cluster_text, chr(10)) OR suffix(cluster_text, chr(13)) OR suffix(cluster_text, chr(160)), false) AS ws_cluster,
        coalesce(proposed_text < '!' OR prefix(proposed_text, chr(160)) OR suffix(proposed_text, ' ') OR suffix(proposed_text, chr(9))
            OR suffix(proposed_text, chr(10)) OR suffix(proposed_text, chr(13)) OR suffix(proposed_text, chr(160)), false) AS ws_proposed,
        coalesce(executed_text < '!' OR prefix(executed_text, chr(160)) OR suffix(executed_text, ' ') OR suffix(executed_text, chr(9))
            OR suffix(executed_text, chr(10)) OR suffix(executed_text, chr(13)) OR suffix(executed_text, chr(160)), false) AS ws_executed,
        row_index
    FROM texts
),
spaced_agg AS (
    SELECT
        count(*) FILTER (WHERE ws_case) AS n16, min(row_index) FILTER (WHERE ws_case) AS i16,
        count(*) FILTER (WHERE ws_cluster) AS n17, min(row_index) FILTER (WHERE ws_cluster) AS i17,
        count(*) FILTER (WHERE ws_proposed) AS n18, min(row_index) FILTER (WHERE ws_proposed) AS i18,
        count(*) FILTER (WHERE ws_executed) AS n19, min(row_index) FILTER (WHERE ws_executed) AS i19
    FROM spaced
),
repeated_hashes AS (
    SELECT count(*) AS n
    FROM (
        SELECT hash(CAST(case_id AS VARCHAR)) AS h
        FROM raw_records
        WHERE case_id IS NOT NULL
        GROUP BY h
        HAVING count(*) > 1
    )
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
