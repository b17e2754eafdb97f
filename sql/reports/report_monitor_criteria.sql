-- The protocol's acceptance criteria as the monitor applied them, one row per criterion x series: the
-- protocol (version, SHA-256), the rule (metric, unit, bounds), the error rate, correction and declared
-- family, the minimum clusters and the horizon a site's settings give, and per site x model version the
-- looks so far (periods), how many were decided and how many alerted. The report groups the rows into
-- criteria (autheval.reporting.report.sections_monitoring). Input: monitor.
SELECT
    protocol_version,
    protocol_sha256,
    metric,
    unit,
    lower,
    upper,
    alpha,
    multiplicity,
    family_size,
    min_clusters,
    horizon_clusters,
    site,
    model_version,
    max(look) AS looks,
    min(period) AS first_period,
    max(period) AS last_period,
    count(*) FILTER (WHERE status <> 'insufficient') AS decided_looks,
    count(*) FILTER (WHERE status = 'alert') AS alert_looks
FROM monitor
GROUP BY protocol_version, protocol_sha256, metric, unit, lower, upper, alpha, multiplicity, family_size,
         min_clusters, horizon_clusters, site, model_version
ORDER BY protocol_sha256, metric, unit, lower NULLS FIRST, upper NULLS LAST, alpha, min_clusters,
         site = 'all', site, model_version = 'all', model_version
