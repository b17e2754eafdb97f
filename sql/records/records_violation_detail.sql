-- The example of a broken rule of records/records_validate.sql: the reported row's case_id and, for the rules
-- about a value, that value as the file gives it. Parameters: $rule_order, $row_index.
-- Input: raw_records. Output: case_id, bad_value.
SELECT
    CASE WHEN $rule_order = 1 THEN NULL ELSE CAST(case_id AS VARCHAR) END AS case_id,
    CASE
        WHEN $rule_order IN (7, 13) THEN CAST(utility_executed_local AS VARCHAR)
        WHEN $rule_order IN (8, 14) THEN CAST(utility_proposed_local AS VARCHAR)
        WHEN $rule_order IN (9, 15) THEN CAST(utility_proposed_global AS VARCHAR)
        WHEN $rule_order = 10
            THEN CAST(utility_proposed_local AS VARCHAR) || ' vs ' || CAST(utility_executed_local AS VARCHAR)
        WHEN $rule_order = 16 THEN CAST(case_id AS VARCHAR)
        WHEN $rule_order = 17 THEN CAST(cluster_id AS VARCHAR)
        WHEN $rule_order = 18 THEN CAST(proposed_action AS VARCHAR)
        WHEN $rule_order = 19 THEN CAST(executed_action AS VARCHAR)
    END AS bad_value
FROM raw_records
WHERE row_index = $row_index
