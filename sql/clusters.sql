-- clusters: each image's lesion-aware cluster and split, as frozen by the study. Input: split_freeze.
SELECT image_id, cluster_id, split
FROM split_freeze
ORDER BY image_id
