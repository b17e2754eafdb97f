-- Per-cluster statistics of the benchmark's bootstrap: for every scope (all items, one axis, one task
-- within its axis) of every mechanism, each cluster's items and correct answers. Clusters are ranked in
-- ascending cluster_id order over every item of the benchmark (one G for every mechanism and scope: one
-- shared set of resamples, the reference scheme's). Input: benchmark_results (sql/proposals/benchmark_results.sql
-- rows of every mechanism). Output: scope_index, mechanism, model, model_revision, scope, axis, task,
-- cluster_rank, cluster_id, n, n_correct.
WITH ranked AS (
    SELECT *, dense_rank() OVER (ORDER BY cluster_id) - 1 AS cluster_rank FROM benchmark_results
),
scoped AS (
    SELECT mechanism, model, model_revision, 0 AS scope_order, 'all' AS scope, CAST(NULL AS VARCHAR) AS axis,
           CAST(NULL AS VARCHAR) AS task, cluster_rank, cluster_id, correct FROM ranked
    UNION ALL SELECT mechanism, model, model_revision, 1, 'axis', axis, NULL, cluster_rank, cluster_id, correct
        FROM ranked
    UNION ALL SELECT mechanism, model, model_revision, 2, 'task', axis, task, cluster_rank, cluster_id, correct
        FROM ranked
),
stats AS (
    SELECT
        mechanism, model, model_revision, scope_order, scope, axis, task, cluster_rank, cluster_id,
        count(*) AS n,
        count(*) FILTER (WHERE correct) AS n_correct
    FROM scoped
    GROUP BY ALL
)
SELECT
    dense_rank() OVER (ORDER BY mechanism, scope_order, axis NULLS FIRST, task NULLS FIRST) - 1 AS scope_index,
    mechanism, model, model_revision, scope, axis, task, cluster_rank, cluster_id, n, n_correct
FROM stats
ORDER BY scope_index, cluster_rank
