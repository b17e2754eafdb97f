-- The scopes of sql/proposals/benchmark_cluster_stats.sql (its output, registered as benchmark_cluster_stats):
-- one row per scope_index with its labels and sizes.
SELECT
    scope_index, mechanism, model, model_revision, scope, axis, task,
    sum(n) AS n_items,
    count(*) AS n_clusters,
    sum(n_correct) AS n_correct
FROM benchmark_cluster_stats
GROUP BY ALL
ORDER BY scope_index
