-- The monitor's looks as reports/trend.png draws them: one series per site x model version x mechanism
-- the monitor watches (model_version 'all': the site to date over its versions; site 'all': every site,
-- last), each rule look by look, with the confidence sequence, the fixed-sample interval, the protocol's
-- bounds and the look's status. Input: monitor.
SELECT site, model_version, mechanism, metric, unit, period, look, n_clusters, estimate, cs_lower, cs_upper,
       ci_lower, ci_upper, lower, upper, alpha_adjusted, status
FROM monitor
ORDER BY site = 'all', site, model_version = 'all', model_version, mechanism, metric, unit, look
