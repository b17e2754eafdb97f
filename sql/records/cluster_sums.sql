-- Twin: records/portable_cluster_stats.sql (every other engine). Differs: fsum here, sum there (checked 1e-12),
-- and the ranks, which records/cluster_stats.sql adds (or, for a record summed in ranges of its cluster
-- ids, autheval/records/cluster_stats.py).
-- Per-cluster sums of `records`: every cluster, or one range of cluster ids where
-- records/cluster_sums_range.sql names `records` its range (autheval/records/cluster_stats.py runs the
-- ranges side by side, each on a connection of its own with one DuckDB thread, so each cluster's rows
-- are added in the record's order whatever the number of ranges or cores: the same rows give the same
-- bits, tests/test_cluster_stats.py). A range's hash table stays small enough not to spill.
-- Input: records (canonical, see records/records_normalize.sql). Unavailable scores sum to NULL here.
-- fsum (compensated: more accurate than sum) is DuckDB's; on other engines use sum.
SELECT
    analysis,
    cluster_id,
    CAST(count(*) AS DOUBLE) AS n,
    CAST(sum(CAST(intervened AS INTEGER)) AS DOUBLE) AS sum_changed,
    fsum(utility_executed_local) AS sum_exec,
    fsum(utility_proposed_local) AS sum_prop,
    fsum(utility_proposed_local - utility_executed_local) AS sum_gap,
    fsum(utility_proposed_global) AS sum_glob,
    fsum(utility_proposed_global - utility_executed_local) AS sum_total_gap,
    fsum(utility_proposed_global - utility_proposed_local) AS sum_utility_gap
FROM records
GROUP BY analysis, cluster_id
