-- What the gate proxy reads (AuthEval spec 2): each image's public metadata and split, and its ideal
-- action level (the target, read on train and validation rows only). Input: images, clusters.
SELECT i.image_id, c.split, i.age, i.sex, i.anatomic_site, i.ideal_action_level
FROM images AS i
JOIN clusters AS c USING (image_id)
ORDER BY i.image_id
