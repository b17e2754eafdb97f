-- The point estimates in the replicate-sum layout: every cluster counted once (rep = -1), so the
-- metric formulas of replicate_metrics.sql serve points and replicates alike. Portable SQL.
-- Input: cluster_stats.
SELECT
    analysis,
    CAST(-1 AS BIGINT) AS rep,
    sum(n) AS w_n,
    sum(sum_changed) AS w_changed,
    sum(sum_exec) AS w_exec,
    sum(sum_prop) AS w_prop,
    sum(sum_gap) AS w_gap,
    sum(sum_glob) AS w_glob,
    sum(sum_total_gap) AS w_total_gap,
    sum(sum_utility_gap) AS w_utility_gap,
    CAST(count(*) AS DOUBLE) AS c_n,
    sum(sum_changed / n) AS c_changed,
    sum(sum_exec / n) AS c_exec,
    sum(sum_prop / n) AS c_prop,
    sum(sum_gap / n) AS c_gap,
    sum(sum_glob / n) AS c_glob,
    sum(sum_total_gap / n) AS c_total_gap,
    sum(sum_utility_gap / n) AS c_utility_gap
FROM cluster_stats
GROUP BY analysis
