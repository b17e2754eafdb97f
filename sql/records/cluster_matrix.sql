-- The statistics matrix of the exact bootstraps: one row per analysis and cluster (rank order), one
-- column per statistic. A replicate's sums are its cluster multiplicities times this matrix (a dense
-- matrix product, autheval/estimation/bootstrap.py). Image-unit columns hold cluster sums; cluster-unit columns
-- (mean_*) hold per-cluster means, and `one` counts clusters. Unavailable scores become 0.0; their
-- metrics are masked as unavailable by the caller. Column names map onto estimates/replicates_point.sql's
-- layout (n -> w_n, sum_x -> w_x, one -> c_n, mean_x -> c_x). matrix_row: the row of the matrix
-- (analyses in name order, then rank), so the caller fills it from batches in any order (no sort of
-- 10^7 rows). Input: cluster_stats. Portable SQL.
WITH runs AS (
    SELECT analysis, any_value(n_clusters) AS n_clusters
    FROM cluster_stats
    GROUP BY analysis
),
offsets AS (
    SELECT analysis, CAST(sum(n_clusters) OVER (ORDER BY analysis) - n_clusters AS BIGINT) AS first_row
    FROM runs
)
SELECT
    s.analysis,
    n_clusters,
    cluster_rank,
    o.first_row + cluster_rank AS matrix_row,
    n,
    coalesce(sum_changed, 0.0) AS sum_changed,
    coalesce(sum_exec, 0.0) AS sum_exec,
    coalesce(sum_prop, 0.0) AS sum_prop,
    coalesce(sum_gap, 0.0) AS sum_gap,
    coalesce(sum_glob, 0.0) AS sum_glob,
    coalesce(sum_total_gap, 0.0) AS sum_total_gap,
    coalesce(sum_utility_gap, 0.0) AS sum_utility_gap,
    CAST(1 AS DOUBLE) AS one,  -- a double: a decimal literal came to numpy as one Python object a row
    coalesce(sum_changed / n, 0.0) AS mean_changed,
    coalesce(sum_exec / n, 0.0) AS mean_exec,
    coalesce(sum_prop / n, 0.0) AS mean_prop,
    coalesce(sum_gap / n, 0.0) AS mean_gap,
    coalesce(sum_glob / n, 0.0) AS mean_glob,
    coalesce(sum_total_gap / n, 0.0) AS mean_total_gap,
    coalesce(sum_utility_gap / n, 0.0) AS mean_utility_gap
FROM cluster_stats AS s
JOIN offsets AS o ON o.analysis = s.analysis
