-- Base node of every image for the cluster ids (AuthEval spec 1.9, DermoGPT section 2).
-- Rules: 'patient_lesion_image': patient id, else lesion id, else image id;
--        'lesion_image': lesion id, else image id (AuthEval's hybrid rule, ISIC 2019);
--        'image': image id only.
-- Under 'patient_lesion_image' images sharing a lesion id are also forced together (lesion node),
-- so a lesion photographed with and without a patient id never straddles two clusters.
-- Input: cluster_input(image_id, lesion_id, patient_id). Parameter $rule.
-- Output: image_id, base_node, lesion_node (NULL unless forced).
SELECT
    image_id,
    'base:' || CASE
        WHEN $rule = 'patient_lesion_image' AND patient_id IS NOT NULL THEN 'patient:' || patient_id
        WHEN $rule IN ('patient_lesion_image', 'lesion_image') AND lesion_id IS NOT NULL THEN 'lesion:' || lesion_id
        ELSE 'image:' || image_id
    END AS base_node,
    CASE WHEN $rule = 'patient_lesion_image' AND lesion_id IS NOT NULL
         THEN 'forced:lesion:' || lesion_id END AS lesion_node
FROM cluster_input
