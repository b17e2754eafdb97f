-- The monitor table as served: each row of monitor_now (in its order, row_index) with its look's first recorded decision
-- (decisions: the whole record, this run's new rows included) beside it, and `decision` saying how the
-- current status stands to it: decided_now (this run made the first decision), as_decided (the same
-- status), superseded_by_later_data (another status on other data: a late file, a correction),
-- superseded_by_protocol (another status under another protocol), recomputed (another status on the
-- same data and protocol: the software or the family of hypotheses changed).
SELECT
    m.* EXCLUDE (row_index),
    d.status AS decided_status,
    d.decided_run,
    d.decided_snapshot,
    CASE
        WHEN d.decided_run = CAST($run_id AS VARCHAR) THEN 'decided_now'
        WHEN d.status IS NOT DISTINCT FROM m.status THEN 'as_decided'
        WHEN d.data_sha256 IS DISTINCT FROM m.data_sha256 THEN 'superseded_by_later_data'
        WHEN d.protocol_sha256 IS DISTINCT FROM m.protocol_sha256 THEN 'superseded_by_protocol'
        ELSE 'recomputed'
    END AS decision
FROM monitor_now AS m
LEFT JOIN decisions AS d
    -- one look: the same (site, model_version, mechanism, metric, unit, period), NULL equal to NULL
    ON (d.site, d.model_version, d.mechanism, d.metric, d.unit, d.period)
        IS NOT DISTINCT FROM (m.site, m.model_version, m.mechanism, m.metric, m.unit, m.period)
ORDER BY m.row_index
