-- Twin: portable_cluster_stats.sql (every other engine). Differs: fsum here, sum there (checked 1e-12).
-- Per-cluster sufficient statistics, computed once per analysis and shared by every scheme and unit.
-- Clusters are ranked by ascending cluster_id (byte order), the order the reference bootstrap draws in.
-- Input: records (canonical, see records_normalize.sql). Unavailable scores sum to NULL here.
-- fsum (compensated: more accurate than sum; the caller runs it on one DuckDB thread so that the same
-- rows give the same bits, warehouse.sql.connect) is DuckDB's;
-- on other engines use sum.
SELECT
    analysis,
    cluster_id,
    CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank,
    CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters,
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
ORDER BY analysis, cluster_rank
