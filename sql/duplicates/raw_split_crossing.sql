-- Clusters whose images sit in more than one split (must be none).
-- Input: cluster_splits(image_id, cluster_id, split). Output: cluster_id, n_images, n_splits, splits.
SELECT
    cluster_id,
    count(*) AS n_images,
    count(DISTINCT split) AS n_splits,
    string_agg(DISTINCT split, ',' ORDER BY split) AS splits
FROM cluster_splits
GROUP BY cluster_id
HAVING count(DISTINCT split) > 1
ORDER BY cluster_id
