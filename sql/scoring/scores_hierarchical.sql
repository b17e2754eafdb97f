-- The review's scores plus the declared secondary score S_hier (DermoGPT section 4, Wu-Palmer over
-- the ISIC 2019 ontology root -> risk level -> diagnosis): where a mechanism proposes a diagnosis,
-- S_hier = 2 * depth(LCA) / (|path_proposed| + |path_reference|), paths of 3 nodes (root depth 1):
-- same diagnosis 1, same risk level 2/3, else 1/3. NULL where no diagnosis is proposed or the
-- reference diagnosis is unknown. It never replaces U_z: the utilities are unchanged.
-- Input: review_scores(analysis, image_id, ...), selections(analysis, mechanism, image_id),
--        proposals(mechanism, image_id, diagnosis), images(image_id, diagnosis),
--        diagnosis_risk(diagnosis, risk_stratum).
WITH compared AS (
    SELECT
        s.*,
        p.diagnosis AS proposed_diagnosis,
        i.diagnosis AS reference_diagnosis,
        CASE
            WHEN p.diagnosis IS NULL OR i.diagnosis IS NULL THEN NULL
            WHEN p.diagnosis = i.diagnosis THEN 3
            WHEN rp.risk_stratum = ri.risk_stratum THEN 2
            ELSE 1
        END AS lca_depth
    FROM review_scores AS s
    LEFT JOIN selections AS sel ON sel.analysis = s.analysis AND sel.image_id = s.image_id
    LEFT JOIN proposals AS p ON p.mechanism = sel.mechanism AND p.image_id = s.image_id
    LEFT JOIN images AS i ON i.image_id = s.image_id
    LEFT JOIN diagnosis_risk AS rp ON rp.diagnosis = p.diagnosis
    LEFT JOIN diagnosis_risk AS ri ON ri.diagnosis = i.diagnosis
)
SELECT * EXCLUDE (lca_depth), 2.0 * lca_depth / (3 + 3) AS s_hier
FROM compared
ORDER BY analysis, image_id
