-- Benchmark accuracy and its whole-cluster bootstrap interval per scope: accuracy = correct / items of
-- the resampled clusters (a ratio of sums), linear-interpolation quantiles (numpy's default) over the
-- replicates, a replicate that drew no item of the scope (undefined) dropped and counted.
-- Input: benchmark_replicate_sums(scope_index, rep, n, n_correct; rep -1 = every cluster once),
-- benchmark_scope_labels (sql/proposals/benchmark_scopes.sql); parameters $lower, $upper.
-- DuckDB-only: quantile_cont (see README).
WITH replicates AS (
    SELECT scope_index, rep, n_correct / nullif(n, 0) AS accuracy FROM benchmark_replicate_sums
),
bounds AS (
    SELECT
        scope_index,
        any_value(accuracy) FILTER (WHERE rep < 0) AS accuracy,
        quantile_cont(accuracy, [$lower, $upper]) FILTER (WHERE rep >= 0 AND accuracy IS NOT NULL) AS ci,
        count(*) FILTER (WHERE rep >= 0) AS reps,
        count(*) FILTER (WHERE rep >= 0 AND accuracy IS NULL) AS reps_undefined
    FROM replicates
    GROUP BY scope_index
)
SELECT
    l.mechanism, l.model, l.model_revision, l.scope, l.axis, l.task,
    CAST(l.n_items AS BIGINT) AS n_items,
    CAST(l.n_clusters AS BIGINT) AS n_clusters,
    CAST(l.n_correct AS BIGINT) AS n_correct,
    b.accuracy,
    b.ci[1] AS ci_lower,
    b.ci[2] AS ci_upper,
    b.reps,
    b.reps_undefined,
    TRUE AS available,
    CAST(NULL AS VARCHAR) AS reason
FROM benchmark_scope_labels AS l
JOIN bounds AS b USING (scope_index)
ORDER BY l.scope_index
