-- Every look of every monitored slice from what its periods add (sql/recurring/monitor_period_sums.sql),
-- without re-reading the records of earlier looks: per slice and look the cases, the clusters (a (site,
-- cluster_id) counted at the period it is first seen) and the counts that decide the record level
-- (records/records_check.sql's), cumulated over the periods to the look. A slice's period may come in
-- several parts (a hub's sites: autheval.sites.monitor), added here. sql/recurring/monitor_look_ratios.sql
-- gives each look's ratios and standard errors.
-- Input: monitor_period_sums. Output: slice, look, period, n_cases, n_clusters, n_changed,
-- n_changed_local, n_local, n_global, n_executed.
WITH per_period AS (
    SELECT
        slice, period,
        sum(new_clusters) AS new_clusters, sum(cases) AS cases, sum(changed) AS changed,
        sum(changed_local) AS changed_local, sum(local_given) AS local_given, sum(global_given) AS global_given,
        sum(executed) AS executed
    FROM monitor_period_sums
    GROUP BY slice, period
),
looks AS (
    SELECT *, CAST(row_number() OVER (PARTITION BY slice ORDER BY period) AS BIGINT) AS look FROM per_period
)
SELECT
    slice, look, period,
    CAST(sum(cases) OVER t AS BIGINT) AS n_cases,
    CAST(sum(new_clusters) OVER t AS BIGINT) AS n_clusters,
    CAST(sum(changed) OVER t AS BIGINT) AS n_changed,
    CAST(sum(changed_local) OVER t AS BIGINT) AS n_changed_local,
    CAST(sum(local_given) OVER t AS BIGINT) AS n_local,
    CAST(sum(global_given) OVER t AS BIGINT) AS n_global,
    CAST(sum(executed) OVER t AS BIGINT) AS n_executed
FROM looks
WINDOW t AS (PARTITION BY slice ORDER BY look ROWS UNBOUNDED PRECEDING)
ORDER BY slice, look
