-- What ingestion excluded or kept with a note, by reason and action. Input: ingest_report.
SELECT reason, action, count(*) AS rows
FROM ingest_report
GROUP BY reason, action
ORDER BY reason, action
