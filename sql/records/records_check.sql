-- Whether a record breaks any rule of records/records_validate.sql, and what it supports, in one pass over
-- its rows: the flags of records/records_rule_flags.sql folded into a few counts and flags (not each
-- rule's count and first row, which only a broken record needs: records/records_validate.sql, run then),
-- plus the GROUP BY on a 64-bit hash of the ids (rule 2's candidates, `repeated_hashes`). The profile
-- decides the record level and mode: n_clusters is HyperLogLog's estimate (bounded memory at any size;
-- an exact distinct count of 10^7 clusters ran out of DuckDB's 1.4 GiB here), which sizes the partitions
-- of the per-cluster sums (autheval/records/cluster_stats.py), whose rows give the exact count;
-- cluster_sample, the cluster ids of about one row in {sample_every} (a hash of the row; an integer
-- literal the caller writes: bound, the pass ran 2.8x slower), whose quantiles cut a large record's
-- clusters into ranges there (no pass of its own).
-- Input: raw_records, as records/records_rule_flags.sql reads it.
-- Output: broken, n_cases, n_clusters, n_changed, n_changed_with_local, n_with_local, n_with_global,
-- n_with_executed, cluster_sample (one row).
WITH {flags},
agg AS (
    SELECT
        count(*) AS n_cases,
        approx_count_distinct(cluster_key) AS n_clusters,
        count(*) FILTER (WHERE changed) AS n_changed,
        count(*) FILTER (WHERE changed AND NOT no_prop) AS n_changed_with_local,
        count(*) FILTER (WHERE NOT no_prop) AS n_with_local,
        count(*) FILTER (WHERE NOT no_glob) AS n_with_global,
        count(*) FILTER (WHERE NOT no_executed) AS n_with_executed,
        -- rules 1, 3, 4, 7-10 and 16-19: any such row breaks the record
        coalesce(bool_or(r1 OR r3 OR r4 OR r7 OR r8 OR r9 OR r10
                         OR ws_case OR ws_cluster OR ws_proposed OR ws_executed), false) AS row_broken,
        -- rules 5, 6, 11 and 12: such a row breaks the record where other rows give the column
        coalesce(bool_or(no_executed), false) AS some_no_executed,
        coalesce(bool_or(no_exec), false) AS some_no_exec,
        coalesce(bool_or(changed AND no_prop), false) AS some_changed_no_prop,
        coalesce(bool_or(no_glob), false) AS some_no_glob,
        -- rules 13-15: sums of |values| times the row count
        sum(abs(exec_value)) FILTER (WHERE isfinite(exec_value)) AS abs13,
        sum(abs(prop_value)) FILTER (WHERE isfinite(prop_value)) AS abs14,
        sum(abs(glob_value)) FILTER (WHERE isfinite(glob_value)) AS abs15,
        list(cluster_key) FILTER (WHERE hash(row_index) % {sample_every} = 0 AND cluster_key IS NOT NULL)
            AS cluster_sample
    FROM flagged
)
SELECT
    row_broken
    OR (some_no_executed AND n_with_executed > 0)
    OR (some_no_exec AND n_with_executed > 0)
    OR (some_changed_no_prop AND n_changed_with_local > 0)
    OR (some_no_glob AND n_with_global > 0)
    OR coalesce(NOT abs13 * n_cases < 1e306, false)
    OR coalesce(NOT abs14 * n_cases < 1e306, false)
    OR coalesce(NOT abs15 * n_cases < 1e306, false)
    OR r.n > 0 AS broken,
    n_cases,
    n_clusters,
    n_changed,
    n_changed_with_local,
    n_with_local,
    n_with_global,
    n_with_executed,
    cluster_sample
FROM agg
CROSS JOIN repeated_hashes AS r
