-- The fine-tune's examples: public fields and reference level of the train split (training) or the
-- validation split (loss per epoch), $split. Input: images, clusters.
SELECT i.image_id, i.path AS image_path, i.age, i.sex, i.anatomic_site, i.ideal_action_level
FROM images AS i
JOIN clusters AS c USING (image_id)
WHERE c.split = $split AND i.ideal_action_level IS NOT NULL
ORDER BY i.image_id
