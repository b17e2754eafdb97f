-- The images whose vision-tower features the probe needs: train (fit), validation (epoch and tau) and
-- the evaluated split ($split; 'all' = every image). Input: images, clusters.
SELECT i.image_id, i.path AS image_path
FROM images AS i
JOIN clusters AS c USING (image_id)
WHERE c.split IN ('train', 'val') OR $split = 'all' OR c.split = $split
ORDER BY i.image_id
