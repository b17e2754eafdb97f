-- The VLMs that scored images for the model mechanisms: model, revision, backend and device, and the
-- images and prompt variants scored. Input: vlm_scores.
SELECT model, revision, backend, method, device, dtype, count(DISTINCT image_id) AS images,
       count(DISTINCT prompt_id) AS prompts
FROM vlm_scores
GROUP BY ALL
ORDER BY model, revision
