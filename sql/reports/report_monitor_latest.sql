-- The monitor's status table: the latest look of every site x model version x mechanism x rule, and,
-- for one that alerts, the period of the first look of the run of alerting looks that reaches it
-- (what autheval.monitoring.monitor.alerts names an alert by). Input: monitor.
WITH series AS (
    SELECT
        *,
        max(look) OVER w AS latest_look,
        coalesce(max(CASE WHEN status <> 'alert' THEN look END) OVER w, 0) + 1 AS alert_from_look
    FROM monitor
    WINDOW w AS (PARTITION BY site, model_version, mechanism, metric, unit, lower, upper)
)
SELECT
    l.site,
    l.model_version,
    l.mechanism,
    l.metric,
    l.unit,
    l.lower,
    l.upper,
    l.period,
    l.look,
    l.n_clusters,
    l.estimate,
    l.cs_lower,
    l.cs_upper,
    l.ci_lower,
    l.ci_upper,
    l.alpha_adjusted,
    l.status,
    l.reason,
    CASE WHEN l.status = 'alert' THEN f.period END AS alert_since
FROM series AS l
LEFT JOIN series AS f
    ON f.site = l.site AND f.model_version = l.model_version AND f.mechanism = l.mechanism
   AND f.metric = l.metric AND f.unit = l.unit AND f.lower IS NOT DISTINCT FROM l.lower
   AND f.upper IS NOT DISTINCT FROM l.upper AND f.look = l.alert_from_look
WHERE l.look = l.latest_look
ORDER BY l.site = 'all', l.site, l.model_version = 'all', l.model_version, l.mechanism, l.metric, l.unit
