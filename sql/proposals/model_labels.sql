-- Each image's split and reference level, the targets a trained mechanism reads on train and validation
-- rows (test rows meet only the locked model). Input: images, clusters.
SELECT i.image_id, c.split, i.ideal_action_level
FROM images AS i
JOIN clusters AS c USING (image_id)
ORDER BY i.image_id
