-- The stratification signature of each cluster for a new split (AuthEval spec 1.10.2):
-- "{risk_stratum}|{site_profile}", each the first non-null value among the cluster's rows in
-- manifest order ('nan' when the cluster has none).
-- Input: image_clusters(image_id, cluster_id), image_columns(image_id, risk_stratum, site_profile,
-- row_index).
-- Output: cluster_id, signature; sorted by (signature, cluster_id).
SELECT
    cluster_id,
    coalesce(arg_min(risk_stratum, row_index) FILTER (WHERE risk_stratum IS NOT NULL), 'nan')
        || '|' ||
    coalesce(arg_min(site_profile, row_index) FILTER (WHERE site_profile IS NOT NULL), 'nan') AS signature
FROM image_clusters
JOIN image_columns USING (image_id)
GROUP BY cluster_id
ORDER BY signature, cluster_id
