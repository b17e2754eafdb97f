-- Per-cluster sufficient statistics, computed once per record (autheval/records/cluster_stats.py) and shared
-- by every scheme, unit and interval method. Clusters are ranked by ascending cluster_id (byte order),
-- the order the reference bootstrap draws in. Input: cluster_sums (records/cluster_sums.sql's rows of every
-- partition). The ranks are whole numbers and the sums are copied, so any number of threads gives the
-- same bytes. Twin: records/portable_cluster_stats.sql (sums and ranks in one query on other engines).
SELECT
    analysis,
    cluster_id,
    CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank,
    CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters,
    n,
    sum_changed,
    sum_exec,
    sum_prop,
    sum_gap,
    sum_glob,
    sum_total_gap,
    sum_utility_gap
FROM cluster_sums
ORDER BY analysis, cluster_rank
