-- Rule violations of a gate-score file given by a source (image_id, s_gate): first offending row per
-- rule. Input: raw_gate_scores(row_index, image_id, s_gate) as text, gate_inputs(image_id).
WITH typed AS (
    SELECT row_index, trim(image_id) AS image_id, s_gate AS s_text, TRY_CAST(s_gate AS DOUBLE) AS s_value
    FROM raw_gate_scores
),
rules AS (
    SELECT 1 AS rule_order, 'image_id' AS column_name, 'must not be empty' AS rule, row_index, image_id,
           NULL AS bad_value, count(*) OVER () AS n_rows
    FROM typed WHERE image_id IS NULL OR image_id = ''
    UNION ALL SELECT 2, 's_gate', 'must be a finite number', row_index, image_id, s_text, count(*) OVER ()
    FROM typed WHERE NOT coalesce(isfinite(s_value), false)
    UNION ALL SELECT 3, 'image_id', 'unknown image id (not in the lake''s images)', row_index, image_id, NULL,
           count(*) OVER ()
    FROM typed WHERE image_id IS NOT NULL AND image_id NOT IN (SELECT image_id FROM gate_inputs)
    UNION ALL SELECT 4, 'image_id', 'one score per image: duplicate', min(row_index), image_id, NULL, count(*) OVER ()
    FROM typed WHERE image_id IS NOT NULL GROUP BY image_id HAVING count(*) > 1
)
SELECT rule_order, column_name, rule, row_index, image_id, bad_value, n_rows
FROM rules
QUALIFY row_number() OVER (PARTITION BY rule_order ORDER BY row_index) = 1
ORDER BY rule_order
