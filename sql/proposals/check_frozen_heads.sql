-- Asset check: the control mechanisms' proposals equal the study's frozen heads (LLaVA-Med head and
-- CLIP probe, artifacts/frozen_proposal_heads.csv). Input: proposals, frozen_heads.
WITH frozen AS (
    SELECT 'LLaVA-Med head' AS mechanism, image_id, llava_med_head AS a_head FROM frozen_heads
    UNION ALL
    SELECT 'CLIP probe', image_id, clip_probe_head FROM frozen_heads
)
SELECT count(*) AS violations, min(f.mechanism || ' / ' || f.image_id) AS example
FROM frozen AS f
LEFT JOIN proposals AS p USING (mechanism, image_id)
WHERE p.a_head IS DISTINCT FROM f.a_head
