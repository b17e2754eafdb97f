-- The gate scores of the images under evaluation: every image of the declared split ($split; 'all'
-- for every image). The review's contexts are built for exactly the clusters these images belong to.
-- Input: gate_proxy(image_id, split, s_gate).
SELECT image_id, s_gate
FROM gate_proxy
WHERE $split = 'all' OR split = $split
ORDER BY image_id
