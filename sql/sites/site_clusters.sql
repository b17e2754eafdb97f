-- A site's per-cluster sums in rank order (ascending cluster_id, the order the reference bootstrap draws
-- in), for the opt-in per-cluster export (autheval/sites/clusters.py hashes each id with the site's salt
-- before anything is written). Input: cluster_stats (sql/records/cluster_stats.sql).
SELECT analysis, cluster_id, n, sum_changed, sum_exec, sum_prop, sum_gap, sum_glob, sum_total_gap, sum_utility_gap
FROM cluster_stats
ORDER BY analysis, cluster_rank
