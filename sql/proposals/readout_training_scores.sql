-- The readout's training rows (AuthEval spec 5.2): the scorer's variant-0 (spec prompt) probabilities
-- of the validation images with their cluster and reference level. Input: vlm_scores, clusters, images.
SELECT s.image_id, c.cluster_id, i.ideal_action_level, s.p_very_low, s.p_low, s.p_moderate, s.p_high
FROM vlm_scores AS s
JOIN clusters AS c USING (image_id)
JOIN images AS i USING (image_id)
WHERE s.variant = 0 AND c.split = 'val' AND i.ideal_action_level IS NOT NULL
ORDER BY s.image_id
