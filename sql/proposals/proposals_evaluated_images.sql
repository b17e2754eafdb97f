-- The images under review: every clustered image of the evaluated split ($split; 'all' for every
-- image), as sql/context/evaluated_gate_scores.sql selects their gate scores (contexts are built for their
-- clusters, and clusters never cross a split). Input: clusters(image_id, split).
SELECT image_id
FROM clusters
WHERE $split = 'all' OR split = $split
ORDER BY image_id
