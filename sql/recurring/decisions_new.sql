-- The looks the monitor decides for the first time in this run: every row of monitor_now (this run's
-- monitor table) whose look (site, model version, mechanism, rule, period) has no row in
-- decisions_before (the decision record so far), stamped with the lake run and the snapshot whose
-- landed data decided it. Earlier decisions are never rewritten: this adds rows only
-- (autheval.monitoring.decisions.record_decisions).
SELECT
    m.site,
    m.model_version,
    m.mechanism,
    m.metric,
    m.unit,
    m.period,
    m.look,
    m.status,
    m.reason,
    m.n_clusters,
    m.estimate,
    m.cs_lower,
    m.cs_upper,
    m.lower,
    m.upper,
    m.alpha_adjusted,
    m.protocol_version,
    m.protocol_sha256,
    m.data_sha256,
    CAST($run_id AS VARCHAR) AS decided_run,
    CAST($snapshot AS BIGINT) AS decided_snapshot
FROM monitor_now AS m
WHERE NOT EXISTS (
    SELECT 1
    FROM decisions_before AS d
    -- one look: the same (site, model_version, mechanism, metric, unit, period), NULL equal to NULL
    WHERE (d.site, d.model_version, d.mechanism, d.metric, d.unit, d.period)
        IS NOT DISTINCT FROM (m.site, m.model_version, m.mechanism, m.metric, m.unit, m.period)
)
ORDER BY m.site, m.model_version, m.mechanism, m.metric, m.unit, m.look
