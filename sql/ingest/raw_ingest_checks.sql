-- Row-level problems of a staged metadata table, one report row per problem (never a silent drop).
-- Input: staged(row_index, image_id, diagnosis_raw, age_raw, has_label, label_tie, ...),
--        diagnosis_map(alias, code, risk_stratum, ideal_action_level).
-- Parameter $has_labels: a separate labels file was joined (so an absent label is 'missing_label').
-- Output: row_index, image_id, column_name, reason, value, action ('excluded' rows leave `images`).
WITH ranked AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY image_id ORDER BY row_index) AS occurrence,
        min(row_index) OVER (PARTITION BY image_id) AS first_row
    FROM staged
),
mapped AS (
    SELECT r.*, m.code
    FROM ranked AS r
    LEFT JOIN diagnosis_map AS m ON lower(trim(r.diagnosis_raw)) = m.alias
),
problems AS (
    SELECT row_index, image_id, 'image_id' AS column_name, 'missing_image_id' AS reason,
           NULL AS value, 'excluded' AS action
    FROM mapped WHERE image_id IS NULL
    UNION ALL
    SELECT row_index, image_id, 'image_id', 'duplicate_image_id',
           'first seen at data row ' || CAST(first_row + 1 AS VARCHAR), 'excluded'
    FROM mapped WHERE image_id IS NOT NULL AND occurrence > 1
    UNION ALL
    SELECT row_index, image_id, 'diagnosis',
           CASE WHEN $has_labels AND NOT has_label THEN 'missing_label' ELSE 'missing_diagnosis' END,
           NULL, 'excluded'
    FROM mapped WHERE image_id IS NOT NULL AND occurrence = 1 AND diagnosis_raw IS NULL
    UNION ALL
    SELECT row_index, image_id, 'diagnosis', 'unknown_diagnosis', diagnosis_raw, 'excluded'
    FROM mapped
    WHERE image_id IS NOT NULL AND occurrence = 1 AND diagnosis_raw IS NOT NULL AND code IS NULL
    UNION ALL
    SELECT row_index, image_id, 'diagnosis', 'ambiguous_label', diagnosis_raw, 'kept'
    FROM mapped WHERE image_id IS NOT NULL AND occurrence = 1 AND label_tie
    UNION ALL
    SELECT row_index, image_id, 'age', 'age_not_numeric', age_raw, 'kept'
    FROM mapped
    WHERE image_id IS NOT NULL AND occurrence = 1 AND age_raw IS NOT NULL
      AND TRY_CAST(trim(age_raw) AS DOUBLE) IS NULL
)
SELECT * FROM problems ORDER BY row_index, reason
