-- The clusters behind each paired contrast "arm_a minus arm_b", for its p-value floor
-- (autheval/estimation/exact.py): the clusters where either arm changed an action (elsewhere both arms'
-- gaps are 0, so the cluster's difference is 0). Input: cluster_stats, contrast_pairs(contrast, arm_a,
-- arm_b), on identical clusters (estimates/paired_clusters_mismatch.sql checked them). Output: contrast,
-- n_clusters, changed_clusters. Portable as written.
SELECT
    c.contrast,
    CAST(count(*) AS BIGINT) AS n_clusters,
    CAST(sum(CASE WHEN a.sum_changed > 0 OR b.sum_changed > 0 THEN 1 ELSE 0 END) AS BIGINT) AS changed_clusters
FROM contrast_pairs AS c
JOIN cluster_stats AS a ON a.analysis = c.arm_a
JOIN cluster_stats AS b ON b.analysis = c.arm_b AND b.cluster_id = a.cluster_id
GROUP BY c.contrast
ORDER BY c.contrast
