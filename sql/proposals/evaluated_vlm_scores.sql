-- The scorer's rows of the images under evaluation ($split; 'all' = every image): variant 0 only, or
-- every prompt variant when $all_variants (the CCT arms). Input: vlm_scores, clusters.
SELECT s.*
FROM vlm_scores AS s
JOIN clusters AS c USING (image_id)
WHERE ($split = 'all' OR c.split = $split) AND ($all_variants OR s.variant = 0)
ORDER BY s.image_id, s.variant
