-- What each period adds to each monitored slice (sql/recurring/monitor_cluster_periods.sql): the clusters
-- first seen in it, its cases and changed cases, and the counts that decide the record level
-- (records/records_check.sql's). Sums over clusters, so the periods of slices that share no cluster add
-- up: a hub pools sites' periods with sql/recurring/monitor_look_sums.sql as one lake does
-- (autheval.sites.monitor). Also the clusters with a case in the period and those with a changed case
-- there (a site's disclosure rule reads them; the monitor does not).
-- Input: monitor_cluster_periods. Output: slice, period, new_clusters, cases, changed, changed_local,
-- local_given, global_given, executed, clusters, changed_clusters.
SELECT
    slice, period,
    sum(CAST(first_seen AS INTEGER)) AS new_clusters, sum(n_period) AS cases, sum(ch_period) AS changed,
    sum(changed_local) AS changed_local, sum(local_given) AS local_given, sum(global_given) AS global_given,
    sum(executed) AS executed,
    count(*) AS clusters,
    count(*) FILTER (WHERE ch_period > 0) AS changed_clusters
FROM monitor_cluster_periods
GROUP BY slice, period
ORDER BY slice, period
