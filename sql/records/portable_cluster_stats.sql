-- Twin: records/cluster_sums.sql + records/cluster_stats.sql (the in-process DuckDB). Differs: sum here, fsum there (checked 1e-12).
-- Per-cluster sufficient statistics in the portable subset (sql/README.md): records/cluster_sums.sql with
-- plain `sum` where it uses DuckDB's compensated `fsum`. Every engine other than the in-process DuckDB
-- runs this form; on DuckDB both forms agree to rounding (the engine matrix checks 1e-12).
-- Clusters are ranked by ascending cluster_id (byte order on DuckDB and Spark alike), the order the
-- reference bootstrap draws in. Input: records (canonical, see records/records_normalize.sql).
SELECT
    analysis,
    cluster_id,
    CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank,
    CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters,
    CAST(count(*) AS DOUBLE) AS n,
    CAST(sum(CAST(intervened AS INTEGER)) AS DOUBLE) AS sum_changed,
    sum(utility_executed_local) AS sum_exec,
    sum(utility_proposed_local) AS sum_prop,
    sum(utility_proposed_local - utility_executed_local) AS sum_gap,
    sum(utility_proposed_global) AS sum_glob,
    sum(utility_proposed_global - utility_executed_local) AS sum_total_gap,
    sum(utility_proposed_global - utility_proposed_local) AS sum_utility_gap
FROM records
GROUP BY analysis, cluster_id
