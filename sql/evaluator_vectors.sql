-- The `evaluator` scheme (AuthEval's generic log evaluator): each metric has its own per-case values,
-- its own resampling stream (seed + offset) and, for delta, its own cluster set (intervened rows only).
-- Output per analysis and metric: the stream's seed offset, cluster count and dense vectors of cluster
-- sums, case counts and per-cluster means in ascending cluster_id order.
-- Input: records. Unavailable scores are 0.0 here; the caller masks those metrics.
-- DuckDB-only: list(... ORDER BY ...).
WITH case_values AS (
    SELECT analysis, cluster_id, 'J' AS metric, 0 AS seed_offset,
           coalesce(utility_executed_local, 0.0) AS value
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'intervention_rate', 1, coalesce(CAST(intervened AS DOUBLE), 0.0)
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'J_auth', 2, coalesce(utility_proposed_local, 0.0)
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'Delta_authority', 3,
           coalesce(utility_proposed_local - utility_executed_local, 0.0)
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'delta', 4,
           coalesce(utility_proposed_local - utility_executed_local, 0.0)
    FROM records
    WHERE intervened
    UNION ALL
    SELECT analysis, cluster_id, 'J_std', 5, coalesce(utility_proposed_global, 0.0)
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'Delta_total', 6,
           coalesce(utility_proposed_global - utility_executed_local, 0.0)
    FROM records
    UNION ALL
    SELECT analysis, cluster_id, 'Delta_utility', 7,
           coalesce(utility_proposed_global - utility_proposed_local, 0.0)
    FROM records
),
per_cluster AS (
    SELECT analysis, metric, seed_offset, cluster_id,
           CAST(count(*) AS DOUBLE) AS n, sum(value) AS s
    FROM case_values
    GROUP BY analysis, metric, seed_offset, cluster_id
)
SELECT
    analysis,
    metric,
    seed_offset,
    CAST(count(*) AS INTEGER) AS n_clusters,
    CAST(sum(n) AS BIGINT) AS n_cases,
    list(s ORDER BY cluster_id) AS v_sum,
    list(n ORDER BY cluster_id) AS v_n,
    list(s / n ORDER BY cluster_id) AS v_mean,
    sum(s) / sum(n) AS point_image,
    sum(s / n) / count(*) AS point_cluster
FROM per_cluster
GROUP BY analysis, metric, seed_offset
