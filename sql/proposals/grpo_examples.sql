-- GRPO's training items (models/grpo.py): the public fields of the $split split's images with the
-- reference diagnosis (the ISIC code) and the image's modality. No source of the lake records
-- morphology labels (ISIC 2019 has none; the synthetic cohort plants geometry, not Derm7pt criteria),
-- so reference_attributes is the empty object: S_morph then credits a completion that claims no
-- attribute present; with ModelsResource.morph_task, models/morph_task.planted_rows sets the diagnosis's
-- planted attributes instead. Input: images, clusters.
SELECT i.image_id, i.path AS image_path, i.age, i.sex, i.anatomic_site,
       i.diagnosis AS reference_diagnosis, '{}' AS reference_attributes, 'dermoscopic' AS modality
FROM images AS i
JOIN clusters AS c USING (image_id)
WHERE c.split = $split AND i.diagnosis IS NOT NULL AND i.diagnosis <> 'UNK'   -- UNK: no node of the ontology
ORDER BY i.image_id
