-- reference_control_proposals: the reference study's two control mechanisms in the `proposals`
-- contract, from their frozen heads (AuthEval spec 5.5): a single preferred level p, slate = the four
-- actions ordered by (|level - p|, then the higher level first):
-- a0 -> a0 a1 a2 a3; a1 -> a1 a2 a0 a3; a2 -> a2 a3 a1 a0; a3 -> a3 a2 a1 a0.
-- Input: frozen_proposal_heads(image_id, llava_med_head, clip_probe_head).
WITH heads AS (
    SELECT 'LLaVA-Med head' AS mechanism, image_id, llava_med_head AS a_head FROM frozen_proposal_heads
    UNION ALL
    SELECT 'CLIP probe' AS mechanism, image_id, clip_probe_head AS a_head FROM frozen_proposal_heads
)
SELECT
    mechanism,
    image_id,
    CASE a_head
        WHEN 'a0' THEN ['a0', 'a1', 'a2', 'a3']
        WHEN 'a1' THEN ['a1', 'a2', 'a0', 'a3']
        WHEN 'a2' THEN ['a2', 'a3', 'a1', 'a0']
        WHEN 'a3' THEN ['a3', 'a2', 'a1', 'a0']
    END AS slate,
    a_head,
    CAST(NULL AS DOUBLE) AS p_very_low,
    CAST(NULL AS DOUBLE) AS p_low,
    CAST(NULL AS DOUBLE) AS p_moderate,
    CAST(NULL AS DOUBLE) AS p_high,
    'frozen_proposal_heads' AS source
FROM heads
ORDER BY mechanism, image_id
