-- The report's numbers: every metric of every analysis in both units, with its interval, the record
-- level and, where a number is not reported, its status and reason. Input: estimates.
SELECT study, analysis, unit, metric, estimate, ci_lower, ci_upper, n, n_clusters, available, status,
       reason, record_level, analysis_order
FROM estimates
ORDER BY study DESC, analysis_order, analysis, unit DESC, metric
