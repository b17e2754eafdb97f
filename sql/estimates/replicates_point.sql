-- Twin: estimates/portable_replicates_weighted.sql (every other engine, the point as rep -1 weights of 1).
-- Differs: no weights table here, and fsum where it sums (checked 1e-12).
-- The point estimates in the replicate-sum layout: every cluster counted once (rep = -1), so the
-- metric formulas of estimates/replicate_metrics.sql serve points and replicates alike. fsum is DuckDB's
-- compensated sum (run on one DuckDB thread, so the same rows give the same bits); use sum elsewhere.
-- Input: cluster_stats.
SELECT
    analysis,
    CAST(-1 AS BIGINT) AS rep,
    fsum(n) AS w_n,
    fsum(sum_changed) AS w_changed,
    fsum(sum_exec) AS w_exec,
    fsum(sum_prop) AS w_prop,
    fsum(sum_gap) AS w_gap,
    fsum(sum_glob) AS w_glob,
    fsum(sum_total_gap) AS w_total_gap,
    fsum(sum_utility_gap) AS w_utility_gap,
    CAST(count(*) AS DOUBLE) AS c_n,
    fsum(sum_changed / n) AS c_changed,
    fsum(sum_exec / n) AS c_exec,
    fsum(sum_prop / n) AS c_prop,
    fsum(sum_gap / n) AS c_gap,
    fsum(sum_glob / n) AS c_glob,
    fsum(sum_total_gap / n) AS c_total_gap,
    fsum(sum_utility_gap / n) AS c_utility_gap
FROM cluster_stats
GROUP BY analysis
