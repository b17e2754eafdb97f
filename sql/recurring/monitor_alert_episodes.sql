-- Every alert the monitor table shows: each run of consecutive alerting looks of one site x model version
-- x mechanism x rule (bounds), with its first look and period (what autheval.monitoring.monitor.alert_id
-- names an alert by, with the series and the protocol's SHA-256), its last look, and whether it is in
-- force (it reaches the series' latest look) or ended. The id itself is computed in Python
-- (autheval.monitoring.acknowledgements.alert_episodes). Input: monitor.
WITH looks AS (
    SELECT
        *,
        max(look) OVER series AS latest_look,
        row_number() OVER (series ORDER BY look)
        - row_number() OVER (PARTITION BY site, model_version, mechanism, metric, unit, lower, upper,
                                          status = 'alert' ORDER BY look) AS island
    FROM monitor
    WINDOW series AS (PARTITION BY site, model_version, mechanism, metric, unit, lower, upper)
)
SELECT
    site,
    model_version,
    mechanism,
    metric,
    unit,
    lower,
    upper,
    min(look) AS first_look,
    arg_min(period, look) AS first_period,
    max(look) AS last_look,
    arg_max(period, look) AS last_period,
    max(look) = max(latest_look) AS in_force,
    arg_max(protocol_version, look) AS protocol_version,
    arg_max(protocol_sha256, look) AS protocol_sha256
FROM looks
WHERE status = 'alert'
GROUP BY site, model_version, mechanism, metric, unit, lower, upper, island
ORDER BY site = 'all', site, model_version = 'all', model_version, mechanism, metric, unit, first_look
