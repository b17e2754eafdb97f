-- Near-duplicate components at a Hamming threshold (AuthEval spec 1.8), numbered and flagged.
-- Components of >= 2 images are named PHASH_000001... by (size descending, smallest image_id);
-- a component crosses splits when its members' known splits differ (NULL when no split is known).
-- Inputs: component_members(image_id VARCHAR, comp BIGINT, phash UBIGINT), only components of >= 2
--         images; image_splits(image_id VARCHAR, split VARCHAR), possibly empty.
-- Parameter $threshold. Output sorted by (component_id, image_id).
WITH sized AS (
    SELECT
        image_id,
        comp,
        phash,
        count(*) OVER (PARTITION BY comp) AS component_size,
        min(image_id) OVER (PARTITION BY comp) AS first_image,
        count(*) OVER (PARTITION BY phash) AS same_hash
    FROM component_members
),
numbered AS (
    SELECT comp,
           printf('PHASH_%06d', row_number() OVER (ORDER BY component_size DESC, first_image)) AS component_id
    FROM (SELECT DISTINCT comp, component_size, first_image FROM sized)
),
with_split AS (
    SELECT s.*, sp.split
    FROM sized AS s
    LEFT JOIN image_splits AS sp USING (image_id)
),
crossing AS (
    SELECT comp,
           CASE WHEN count(split) = 0 THEN NULL ELSE count(DISTINCT split) > 1 END AS crosses
    FROM with_split
    GROUP BY comp
)
SELECT
    n.component_id,
    w.component_size,
    c.crosses AS component_crosses_split,
    CAST($threshold AS INTEGER) AS threshold,
    w.same_hash >= 2 AS exact_hash_duplicate,
    w.image_id,
    w.split,
    printf('%016x', w.phash) AS image_hash
FROM with_split AS w
JOIN numbered AS n USING (comp)
JOIN crossing AS c USING (comp)
ORDER BY n.component_id, w.image_id
