-- Every record of every analysis placed in one group per declared grouping (DermoGPT section 3):
-- sex, age band, anatomic site, workflow profile, source, Fitzpatrick skin type (where recorded) and
-- ita_category (the skin tone estimated from the pixels: an estimate, not a label). A missing value is
-- its own group ('missing'), so no record is dropped from a grouping.
-- Input: records (the review's, AuthEval log layout + analysis), images(image_id, sex, age,
--        anatomic_site, source, fitzpatrick_skin_type, ita_category, ideal_action_level), contexts(cluster_id, profile).
--        Parameter $groupings (the grouping names to produce).
-- Output: analysis, grouping, group_value, case_id, cluster_id, proposed_action, executed_action,
--         the three utilities, reference_level.
WITH joined AS (
    SELECT
        r.*,
        i.ideal_action_level AS reference_level,
        coalesce(nullif(lower(trim(CAST(i.sex AS VARCHAR))), ''), 'missing') AS sex,
        CASE
            WHEN i.age > 0 AND i.age <= 30 THEN '<30'
            WHEN i.age > 30 AND i.age <= 50 THEN '30-50'
            WHEN i.age > 50 AND i.age <= 70 THEN '50-70'
            WHEN i.age > 70 AND i.age <= 200 THEN '70+'
            ELSE 'missing'
        END AS age_band,
        coalesce(nullif(trim(CAST(i.anatomic_site AS VARCHAR)), ''), 'missing') AS anatomic_site,
        coalesce(c.profile, 'missing') AS profile,
        coalesce(nullif(trim(CAST(i.source AS VARCHAR)), ''), 'missing') AS source,
        coalesce(nullif(trim(CAST(i.fitzpatrick_skin_type AS VARCHAR)), ''), 'missing') AS fitzpatrick_skin_type,
        coalesce(nullif(trim(CAST(i.ita_category AS VARCHAR)), ''), 'missing') AS ita_category
    FROM records AS r
    JOIN images AS i ON i.image_id = r.case_id
    LEFT JOIN contexts AS c ON c.cluster_id = r.cluster_id
),
long AS (
    UNPIVOT joined
    ON sex, age_band, anatomic_site, profile, source, fitzpatrick_skin_type, ita_category
    INTO NAME grouping VALUE group_value
)
SELECT
    analysis, grouping, group_value, case_id, cluster_id, proposed_action, executed_action,
    utility_executed_local, utility_proposed_local, utility_proposed_global, reference_level
FROM long
WHERE list_contains($groupings, grouping)
-- a grouping the data cannot split (fewer than two known values, e.g. Fitzpatrick type in ISIC, or one
-- source) is left out
QUALIFY count(DISTINCT group_value) FILTER (WHERE group_value <> 'missing') OVER (PARTITION BY grouping) >= 2
