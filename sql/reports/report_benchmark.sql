-- The benchmark as the report shows it: each mechanism's accuracy on the closed-ended benchmark file
-- with its whole-cluster interval, per scope (all, axis, task), or why it was not scored. Input: benchmark.
SELECT mechanism, model, scope, axis, task, n_items, n_clusters, accuracy, ci_lower, ci_upper, available, reason
FROM benchmark
ORDER BY mechanism, scope = 'task', scope = 'axis', axis, task
