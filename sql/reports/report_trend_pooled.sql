-- The trend of an older lake, whose trend table has no site or model version columns (every landed log
-- pooled): per pool and period ('all' = every landed log to date), p, delta and the authority gap with
-- intervals, or why a number is not reported. Input: trend.
SELECT period, pool, unit, metric, estimate, ci_lower, ci_upper, n, n_clusters, available, status, reason
FROM trend
WHERE metric IN ('intervention_rate', 'delta', 'Delta_authority')
ORDER BY pool, period, unit DESC, metric
