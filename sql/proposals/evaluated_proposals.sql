-- The proposals under review: those for images whose cluster has a review context (the evaluated
-- split). Input: all_proposals, clusters(image_id, cluster_id), contexts(cluster_id).
SELECT p.*
FROM all_proposals AS p
JOIN clusters AS c USING (image_id)
WHERE c.cluster_id IN (SELECT cluster_id FROM contexts)
