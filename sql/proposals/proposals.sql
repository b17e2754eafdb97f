-- proposals: each mechanism's proposed action (the head of its ranked slate) per image.
-- Input: reference_traces (the mechanism study holds one trace per mechanism).
SELECT DISTINCT mechanism, policy_id, image_id, slate_size, a_head
FROM reference_traces
WHERE study = 'mechanisms'
ORDER BY mechanism, image_id
