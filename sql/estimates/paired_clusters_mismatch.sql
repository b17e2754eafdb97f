-- Clusters where the two arms of a paired contrast differ (present in one arm only, or with a
-- different number of cases): a paired contrast needs identical clusters.
-- Input: cluster_stats, contrast_pairs(contrast, arm_a, arm_b). Output: up to 5 mismatches.
WITH arm_a AS (
    SELECT c.contrast, s.cluster_id, s.n
    FROM contrast_pairs AS c
    JOIN cluster_stats AS s ON s.analysis = c.arm_a
),
arm_b AS (
    SELECT c.contrast, s.cluster_id, s.n
    FROM contrast_pairs AS c
    JOIN cluster_stats AS s ON s.analysis = c.arm_b
)
SELECT
    coalesce(a.contrast, b.contrast) AS contrast,
    coalesce(a.cluster_id, b.cluster_id) AS cluster_id,
    a.n AS n_arm_a,
    b.n AS n_arm_b
FROM arm_a AS a
FULL OUTER JOIN arm_b AS b ON a.contrast = b.contrast AND a.cluster_id = b.cluster_id
WHERE a.cluster_id IS NULL OR b.cluster_id IS NULL OR a.n <> b.n
ORDER BY contrast, cluster_id
LIMIT 5
