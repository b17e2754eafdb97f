-- The vision towers whose features the probe mechanism was fitted on, and the images embedded.
-- Input: probe_features.
SELECT model, count(DISTINCT image_id) AS images
FROM probe_features
GROUP BY model
ORDER BY model
