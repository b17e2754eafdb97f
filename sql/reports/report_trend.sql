-- The monitored trend: per site x model version ('all' = pooled over sites or versions, as the monitor
-- names them), pool and period ('all' = every landed log to date), p, delta and the authority gap with
-- intervals, or why a number is not reported; one row per site x model version x pool x period x unit x
-- metric. Input: trend.
SELECT site, model_version, period, pool, unit, metric, estimate, ci_lower, ci_upper, n, n_clusters, available,
       status, reason
FROM trend
WHERE metric IN ('intervention_rate', 'delta', 'Delta_authority')
ORDER BY site = 'all', site, model_version = 'all', model_version, pool, period, unit DESC, metric
