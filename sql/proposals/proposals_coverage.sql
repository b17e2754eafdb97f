-- Coverage of the evaluated images by each mechanism of a proposals file: the first mechanism (in
-- name order) that misses some evaluated image (every one when none is evaluated), with the counts
-- and an example; no row when every mechanism covers them all. A proposal for an image outside the
-- evaluated set is allowed (unused).
-- Input: proposals(mechanism, image_id) (validated), evaluated_images(image_id).
-- Output: mechanism, n_evaluated, n_covered, first missing image_id, first image_id (when none covered).
WITH mechanisms AS (
    SELECT mechanism, min(image_id) AS first_image
    FROM proposals
    GROUP BY mechanism
),
covered AS (
    SELECT p.mechanism, count(DISTINCT p.image_id) AS n_covered
    FROM proposals AS p
    JOIN evaluated_images AS e USING (image_id)
    GROUP BY p.mechanism
),
missing AS (
    SELECT m.mechanism, min(e.image_id) AS first_missing
    FROM mechanisms AS m
    CROSS JOIN evaluated_images AS e
    WHERE NOT EXISTS (SELECT 1 FROM proposals AS p WHERE p.mechanism = m.mechanism AND p.image_id = e.image_id)
    GROUP BY m.mechanism
)
SELECT
    m.mechanism,
    (SELECT count(DISTINCT image_id) FROM evaluated_images) AS n_evaluated,
    coalesce(c.n_covered, 0) AS n_covered,
    x.first_missing,
    m.first_image
FROM mechanisms AS m
LEFT JOIN covered AS c USING (mechanism)
LEFT JOIN missing AS x USING (mechanism)
WHERE coalesce(c.n_covered, 0) = 0 OR c.n_covered < (SELECT count(DISTINCT image_id) FROM evaluated_images)
ORDER BY m.mechanism
LIMIT 1
