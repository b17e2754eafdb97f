-- Exact-hash groups (AuthEval spec 1.7): sets of >= 2 images with the identical 16-hex hash, numbered
-- EXACT_PHASH_000001... by ascending hex hash string.
-- Input: image_phash(image_id VARCHAR, phash UBIGINT).
-- Output: exact_group_id, group_size, image_id, image_hash; sorted by (exact_group_id, image_id).
WITH hexed AS (
    SELECT image_id, printf('%016x', phash) AS image_hash FROM image_phash
),
groups AS (
    SELECT image_hash, count(*) AS group_size
    FROM hexed
    GROUP BY image_hash
    HAVING count(*) >= 2
),
numbered AS (
    SELECT image_hash, group_size,
           printf('EXACT_PHASH_%06d', row_number() OVER (ORDER BY image_hash)) AS exact_group_id
    FROM groups
)
SELECT n.exact_group_id, n.group_size, h.image_id, h.image_hash
FROM hexed AS h
JOIN numbered AS n USING (image_hash)
ORDER BY n.exact_group_id, h.image_id
