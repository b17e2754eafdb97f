-- reference_implied_s_gate: a gate-proxy score per reference test image inside the risk bin that
-- reference_implied_contexts found for its cluster (the study's own scores are not shipped).
-- Input: clusters(image_id, cluster_id), reference_implied_contexts(cluster_id, bin_level),
-- bin_scores(bin_level, s_gate).
SELECT c.image_id, b.s_gate
FROM clusters AS c
JOIN reference_implied_contexts AS r ON r.cluster_id = c.cluster_id
JOIN bin_scores AS b ON b.bin_level = r.bin_level
