-- The per-cluster sums of the latest look's slices: each site's (site_cluster_sums, sql/records/cluster_sums.sql
-- over sql/recurring/deployment_sim_look_slices.sql), and every site pooled ('all'), whose clusters are the
-- sites' clusters (their ids qualified by the site), with the same sums: one GROUP BY of the records
-- instead of two; sql/estimates/delta_method.sql reads them as they are (no rank). Input: site_cluster_sums.
-- Output: records/cluster_sums.sql's columns.
SELECT * FROM site_cluster_sums
UNION ALL
SELECT 'all' AS analysis, * EXCLUDE (analysis) FROM site_cluster_sums
