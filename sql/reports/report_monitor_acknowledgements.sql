-- The record of what was done about each alert (`autheval monitor ack`), in the order it was recorded:
-- the alert it names (id, series, rule, the look it alerted from), the action, who, the note, when (UTC)
-- and the lake run that committed it. Input: monitor_acknowledgements (append-only).
-- (every column of the record but the protocol's version and hash and the snapshot it was read from, in
-- the record's order: alert_id, the series and rule, first_look, first_period, action, recorded_by, note,
-- recorded_at, recorded_run)
SELECT * EXCLUDE (protocol_version, protocol_sha256, read_snapshot)
FROM monitor_acknowledgements
ORDER BY recorded_at, recorded_run
