-- The monitor's looks as reports/trend.png draws them: every site to date over its model versions
-- (model_version 'all'; 'all' sites last), each rule look by look, with the confidence sequence, the
-- fixed-sample interval and the protocol's bounds. Input: monitor.
SELECT site, metric, unit, period, look, n_clusters, estimate, cs_lower, cs_upper, ci_lower, ci_upper, lower,
       upper, alpha_adjusted, status
FROM monitor
WHERE model_version = 'all'
ORDER BY site = 'all', site, metric, unit, look
