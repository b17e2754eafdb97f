-- Duplicate components whose members span more than one split: the leakage report.
-- Input: duplicates (the `duplicates` table). Output: one row per crossing component.
SELECT
    hash_kind,
    threshold,
    use,
    component_id,
    count(*) AS component_size,
    count(DISTINCT split) AS n_splits,
    string_agg(DISTINCT split, ',' ORDER BY split) AS splits,
    string_agg(image_id, ',' ORDER BY image_id) AS image_ids
FROM duplicates
WHERE component_crosses_split
GROUP BY hash_kind, threshold, use, component_id
ORDER BY hash_kind, threshold, use, component_id
