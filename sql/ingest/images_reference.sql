-- images from the reference study: every image of the frozen ISIC 2019 split; for test images the
-- risk stratum is recovered from the proposal and its global score (AuthEval section 4: U_g is
-- rule-known, so (a_head, Ug_head) identifies the reference level). Metadata fields the reference
-- files do not carry stay NULL. Input: split_freeze, reference_traces.
WITH strata(level, stratum, severity) AS (
    VALUES (0, 'very_low', 0.5), (1, 'low', 1.0), (2, 'moderate', 2.0), (3, 'high', 4.0)
),
heads AS (
    SELECT DISTINCT image_id, CAST(substr(a_head, 2) AS INTEGER) AS head, "Ug_head" AS ug
    FROM reference_traces
    WHERE "Ug_head" IS NOT NULL
),
matches AS (
    SELECT h.image_id, s.level, s.stratum
    FROM heads AS h
    CROSS JOIN strata AS s
    WHERE abs(
        CASE
            WHEN h.head < s.level THEN ((-1.2) * s.severity) * (s.level - h.head)
            WHEN h.head > s.level THEN (-1.2) * (h.head - s.level)
            ELSE 0.0
        END - h.ug) < 1e-9
),
risk AS (
    SELECT image_id, min(stratum) AS risk_stratum, min(level) AS ideal_action_level,
           count(DISTINCT level) AS n_levels
    FROM matches
    GROUP BY image_id
)
SELECT
    f.image_id,
    CAST(f.lesion_id AS VARCHAR) AS lesion_id,
    CAST(NULL AS VARCHAR) AS patient_id,
    CAST(NULL AS DOUBLE) AS age,
    CAST(NULL AS VARCHAR) AS sex,
    CAST(NULL AS VARCHAR) AS anatomic_site,
    CAST(NULL AS VARCHAR) AS diagnosis,
    CASE WHEN r.n_levels = 1 THEN r.risk_stratum END AS risk_stratum,
    CASE WHEN r.n_levels = 1 THEN r.ideal_action_level END AS ideal_action_level,
    CAST(NULL AS VARCHAR) AS path,
    'isic2019_reference' AS source
FROM split_freeze AS f
LEFT JOIN risk AS r USING (image_id)
ORDER BY f.image_id
