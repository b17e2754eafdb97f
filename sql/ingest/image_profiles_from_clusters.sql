-- image_profiles_from_clusters: image profiles from declared cluster profiles (a source that knows
-- each cluster's workflow profile, e.g. the reference study's trace-identified ones): every member
-- image takes its cluster's profile; with several candidates per cluster, the smallest name.
-- Input: clusters(image_id, cluster_id), cluster_profiles(cluster_id, profile).
SELECT c.image_id, min(p.profile) AS profile
FROM clusters AS c
JOIN cluster_profiles AS p ON p.cluster_id = c.cluster_id
GROUP BY c.image_id
