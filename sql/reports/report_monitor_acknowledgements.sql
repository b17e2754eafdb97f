-- The record of what was done about each alert (`autheval monitor ack`), in the order it was recorded:
-- the alert it names (id, series, rule, the look it alerted from), the action, who, the note, when (UTC)
-- and the lake run that committed it. Input: monitor_acknowledgements (append-only).
SELECT
    alert_id,
    site,
    model_version,
    mechanism,
    metric,
    unit,
    lower,
    upper,
    first_look,
    first_period,
    action,
    recorded_by,
    note,
    recorded_at,
    recorded_run
FROM monitor_acknowledgements
ORDER BY recorded_at, recorded_run
