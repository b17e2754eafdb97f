-- The per-row flags of the record rules (a fragment: the CTEs `typed` and `flagged` over raw_records, and
-- `repeated_hashes`, the ids' repeated 64-bit hashes),
-- shared by records/records_validate.sql (which rules are broken, and where) and records/records_check.sql
-- (whether any is, with the record's profile, in one pass): one definition of each rule.
-- r1, r3-r10 and ws_* are broken rows; no_executed, no_exec, changed AND no_prop and no_glob break rules
-- 5, 6, 11 and 12 only where other rows give the column; the values' magnitudes give rules 13-15.
-- Ids and actions must not begin or end with whitespace (rules 16-19): `a1 ` and `a1` would count as
-- different actions (a false intervention), `k1 ` as another cluster. Refused, never stripped: the
-- record is what the service logged. Checked on text columns only (typeof folds when the query is
-- bound: an integer id column costs nothing), by comparisons and suffix tests (a regex cost 4x more):
-- a leading character below '!' (any ASCII space or control character; also a blank id) or a no-break
-- space, a trailing space, tab, line break or no-break space.
-- Input: raw_records(row_index, case_id, cluster_id, proposed_action, executed_action,
-- utility_executed_local, utility_proposed_local, utility_proposed_global), of the types
-- autheval.records.schema.check_column_types allows.
typed AS (
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
        TRY_CAST(utility_proposed_global AS DOUBLE) AS glob_value,
        CAST(cluster_id AS VARCHAR) AS cluster_key,
        -- the id and action columns that are text; NULL (a constant) for other types
        CASE WHEN typeof(case_id) = 'VARCHAR' THEN CAST(case_id AS VARCHAR) END AS case_text,
        CASE WHEN typeof(cluster_id) = 'VARCHAR' THEN CAST(cluster_id AS VARCHAR) END AS cluster_text,
        CASE WHEN typeof(proposed_action) = 'VARCHAR' THEN CAST(proposed_action AS VARCHAR) END AS proposed_text,
        CASE WHEN typeof(executed_action) = 'VARCHAR' THEN CAST(executed_action AS VARCHAR) END AS executed_text
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
            AND abs(prop_value - exec_value) > 1e-12, false) AS r10,
        coalesce(case_text < '!' OR prefix(case_text, chr(160)) OR suffix(case_text, ' ') OR suffix(case_text, chr(9))
            OR suffix(case_text, chr(10)) OR suffix(case_text, chr(13)) OR suffix(case_text, chr(160)), false) AS ws_case,
        coalesce(cluster_text < '!' OR prefix(cluster_text, chr(160)) OR suffix(cluster_text, ' ') OR suffix(cluster_text, chr(9))
            OR suffix(cluster_text, chr(10)) OR suffix(cluster_text, chr(13)) OR suffix(cluster_text, chr(160)), false) AS ws_cluster,
        coalesce(proposed_text < '!' OR prefix(proposed_text, chr(160)) OR suffix(proposed_text, ' ') OR suffix(proposed_text, chr(9))
            OR suffix(proposed_text, chr(10)) OR suffix(proposed_text, chr(13)) OR suffix(proposed_text, chr(160)), false) AS ws_proposed,
        coalesce(executed_text < '!' OR prefix(executed_text, chr(160)) OR suffix(executed_text, ' ') OR suffix(executed_text, chr(9))
            OR suffix(executed_text, chr(10)) OR suffix(executed_text, chr(13)) OR suffix(executed_text, chr(160)), false) AS ws_executed
    FROM typed
),
repeated_hashes AS (  -- rule 2's candidates: 64-bit hashes of the ids that repeat
    SELECT count(*) AS n
    FROM (
        SELECT hash(CAST(case_id AS VARCHAR)) AS h
        FROM raw_records
        WHERE case_id IS NOT NULL
        GROUP BY h
        HAVING count(*) > 1
    )
)
