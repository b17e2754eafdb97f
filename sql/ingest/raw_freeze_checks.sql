-- Validation of a frozen split before use (AuthEval spec 1.11), first offending row per rule.
-- Inputs: frozen_split(row_index, image_id, cluster_id, split) as read (text);
--         computed(image_id, cluster_id): the cluster ids recomputed from the ingested data.
-- Output: rule_order, column_name, rule, row_index (NULL: not a freeze row), image_id, value, n_rows.
WITH f AS (
    SELECT *, count(*) OVER (PARTITION BY image_id) AS id_count FROM frozen_split
),
crossing AS (
    SELECT cluster_id, string_agg(DISTINCT split, ',' ORDER BY split) AS splits
    FROM f WHERE split IN ('train', 'val', 'test')
    GROUP BY cluster_id HAVING count(DISTINCT split) > 1
),
violations AS (
    SELECT 1 AS rule_order, 'image_id' AS column_name, 'must not be empty' AS rule,
           row_index, image_id, NULL AS value
    FROM f WHERE image_id IS NULL
    UNION ALL
    SELECT 2, 'image_id', 'must be unique', row_index, image_id, image_id
    FROM f WHERE image_id IS NOT NULL AND id_count > 1
    UNION ALL
    SELECT 3, 'split', 'must be one of train, val, test', row_index, image_id, split
    FROM f WHERE split IS NULL OR split NOT IN ('train', 'val', 'test')
    UNION ALL
    SELECT 4, 'image_id', 'is not in the ingested images', row_index, image_id, image_id
    FROM f WHERE image_id IS NOT NULL AND image_id NOT IN (SELECT image_id FROM computed)
    UNION ALL
    SELECT 5, 'image_id', 'an ingested image is missing from the freeze', NULL, c.image_id, c.image_id
    FROM computed AS c WHERE c.image_id NOT IN (SELECT image_id FROM f WHERE image_id IS NOT NULL)
    UNION ALL
    SELECT 6, 'cluster_id', 'differs from the cluster id recomputed from lesion ids and exact groups',
           f.row_index, f.image_id, 'frozen ' || coalesce(f.cluster_id, 'NULL') || ', recomputed ' || c.cluster_id
    FROM f JOIN computed AS c USING (image_id)
    WHERE f.cluster_id IS DISTINCT FROM c.cluster_id
    UNION ALL
    SELECT 7, 'split', 'a cluster spans more than one split', min(f.row_index), min(f.image_id),
           any_value(f.cluster_id) || ' in ' || any_value(x.splits)
    FROM f JOIN crossing AS x USING (cluster_id)
    GROUP BY f.cluster_id
)
SELECT rule_order, column_name, rule, row_index, image_id, value, n_rows
FROM (
    SELECT *,
           row_number() OVER (PARTITION BY rule_order ORDER BY row_index NULLS FIRST, image_id) AS rule_rank,
           count(*) OVER (PARTITION BY rule_order) AS n_rows
    FROM violations
)
WHERE rule_rank = 1
ORDER BY rule_order
