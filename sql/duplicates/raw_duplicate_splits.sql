-- The duplicates with each member's split and whether its component crosses splits (AuthEval 1.8's
-- report), from the `duplicates` table as found: no second near-duplicate search. A component crosses
-- splits when its members' known splits differ (NULL when none of its members has a split, e.g. all
-- dropped). Inputs: duplicates (the duplicates table), image_splits(image_id VARCHAR, split VARCHAR).
-- Output: the duplicates' columns, sorted as the duplicates table is.
WITH with_split AS (
    SELECT d.* EXCLUDE (split, component_crosses_split), s.split
    FROM duplicates AS d
    LEFT JOIN image_splits AS s USING (image_id)
),
crossing AS (
    SELECT hash_kind, threshold, use, component_id,
           CASE WHEN count(split) = 0 THEN NULL ELSE count(DISTINCT split) > 1 END AS component_crosses_split
    FROM with_split
    GROUP BY ALL
)
SELECT
    w.hash_kind,
    w.threshold,
    w.use,
    w.component_id,
    w.component_size,
    c.component_crosses_split,
    w.exact_group_id,
    w.exact_hash_duplicate,
    w.image_id,
    w.split,
    w.image_hash
FROM with_split AS w
JOIN crossing AS c USING (hash_kind, threshold, use, component_id)
ORDER BY w.hash_kind, w.threshold, w.use, w.component_id, w.image_id
