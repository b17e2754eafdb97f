-- Twin: estimates/portable_evaluator_clusters.sql (every other engine). Differs: fsum here, sum there (checked 1e-12).
-- The `evaluator` scheme (AuthEval's generic log evaluator): each metric has its own per-case values,
-- its own resampling stream (seed + offset) and, for delta, its own cluster set (intervened rows only).
-- Output: one row per analysis, metric and cluster in ascending cluster_id order, with the rank and
-- cluster count of the metric's stream and the cluster's terms of both units' ratios of resampled
-- sums: image_weighted = sum s / sum n (the sum of values over the case count), cluster_equal =
-- sum m / sum k. For every metric but delta, m is the cluster mean (s / n) and k = 1, so the cluster
-- unit is the mean of the resampled cluster means. For delta (intervened rows only) m is the
-- cluster's gap over all its cases and k its share of changed cases, so the cluster unit is the
-- resampled cluster-equal Delta over the resampled cluster-equal p, the point's definition
-- (a cluster with no change adds nothing to either sum). The point estimates are not taken from
-- here: every scheme's point is estimates/replicates_point.sql's.
-- Input: records. Unavailable scores are 0.0 here; the caller masks those metrics.
-- One pass over the records (every metric's sums per cluster at once, then one row per metric): the
-- same sums, in the same row order, as a pass per metric, 5x less work (DuckDB-only: fsum; the
-- portable form is estimates/portable_evaluator_clusters.sql).
WITH per_cluster AS (
    SELECT
        analysis,
        cluster_id,
        CAST(count(*) AS DOUBLE) AS n,
        CAST(count(*) FILTER (WHERE intervened) AS DOUBLE) AS n_changed,
        fsum(coalesce(utility_executed_local, 0.0)) AS s_exec,
        fsum(coalesce(CAST(intervened AS DOUBLE), 0.0)) AS s_changed,
        fsum(coalesce(utility_proposed_local, 0.0)) AS s_prop,
        fsum(coalesce(utility_proposed_local - utility_executed_local, 0.0)) AS s_gap,
        fsum(coalesce(utility_proposed_local - utility_executed_local, 0.0)) FILTER (WHERE intervened) AS s_delta,
        fsum(coalesce(utility_proposed_global, 0.0)) AS s_glob,
        fsum(coalesce(utility_proposed_global - utility_executed_local, 0.0)) AS s_total_gap,
        fsum(coalesce(utility_proposed_global - utility_proposed_local, 0.0)) AS s_utility_gap
    FROM records
    GROUP BY analysis, cluster_id
),
ranked AS (  -- clusters ranked by ascending cluster_id once; delta's stream ranks its own clusters
    SELECT
        *,
        CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank,
        CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters
    FROM per_cluster
),
changed AS (
    SELECT
        analysis, n, n_changed, s_delta,
        CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_rank) - 1 AS INTEGER) AS cluster_rank,
        CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters
    FROM ranked
    WHERE n_changed > 0
),
per_metric AS (
    SELECT analysis, 'J' AS metric, 0 AS seed_offset, n_clusters, cluster_rank, s_exec AS s, n,
           s_exec / n AS m, 1.0 AS k FROM ranked
    UNION ALL SELECT analysis, 'intervention_rate', 1, n_clusters, cluster_rank, s_changed, n, s_changed / n, 1.0 FROM ranked
    UNION ALL SELECT analysis, 'J_auth', 2, n_clusters, cluster_rank, s_prop, n, s_prop / n, 1.0 FROM ranked
    UNION ALL SELECT analysis, 'Delta_authority', 3, n_clusters, cluster_rank, s_gap, n, s_gap / n, 1.0 FROM ranked
    UNION ALL SELECT analysis, 'delta', 4, n_clusters, cluster_rank, s_delta, n_changed, s_delta / n, n_changed / n FROM changed
    UNION ALL SELECT analysis, 'J_std', 5, n_clusters, cluster_rank, s_glob, n, s_glob / n, 1.0 FROM ranked
    UNION ALL SELECT analysis, 'Delta_total', 6, n_clusters, cluster_rank, s_total_gap, n, s_total_gap / n, 1.0 FROM ranked
    UNION ALL SELECT analysis, 'Delta_utility', 7, n_clusters, cluster_rank, s_utility_gap, n, s_utility_gap / n, 1.0 FROM ranked
)
SELECT analysis, metric, seed_offset, n_clusters, cluster_rank, s, n, m, CAST(k AS DOUBLE) AS k
FROM per_metric
ORDER BY analysis, metric, cluster_rank
