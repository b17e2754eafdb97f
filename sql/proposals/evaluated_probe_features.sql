-- The probe features of the images under evaluation ($split; 'all' = every image). Input:
-- probe_features(image_id, feature), clusters.
SELECT f.image_id, f.feature
FROM probe_features AS f
JOIN clusters AS c USING (image_id)
WHERE $split = 'all' OR c.split = $split
ORDER BY f.image_id
