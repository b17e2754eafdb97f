-- What each look's records support: the counts that decide its record level (as records/records_check.sql's)
-- and its cluster count. Input: monitor_look_sums (sql/recurring/monitor_look_sums.sql).
SELECT slice, look, period, n_cases, n_clusters, n_changed, n_changed_local, n_local, n_global, n_executed
FROM monitor_look_sums
ORDER BY slice, look
