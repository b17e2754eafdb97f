-- The images the VLM scorer reads, public fields only, and whether each is under evaluation: variant 0
-- (the spec prompt) runs on the validation split (the readout is trained there) and on the evaluated
-- split ($split; 'all' = every image), the other CCT prompt variants on the evaluated split only.
-- Input: images, clusters.
SELECT i.image_id, i.path AS image_path, i.age, i.sex, i.anatomic_site,
       ($split = 'all' OR c.split = $split) AS evaluated
FROM images AS i
JOIN clusters AS c USING (image_id)
WHERE c.split = 'val' OR $split = 'all' OR c.split = $split
ORDER BY i.image_id
