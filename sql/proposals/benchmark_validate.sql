-- Rule violations of a user's benchmark file: the first offending row per broken rule, in rule order.
-- Input: parsed_benchmark (sql/proposals/benchmark_parse.sql over the file's rows, all text).
-- Output: rule_order, column_name, rule, row_index, item_id, bad_value, n_rows.
-- $max_prompt_chars bounds an item's prompt (its question and options): a model's memory grows with
-- the square of the prompt's length, so a 320,000-character question would ask for gigabytes.
WITH checked AS (
    SELECT
        *,
        item_id IS NULL OR trim(item_id) = '' AS r1,
        coalesce(trim(image_id), '') = '' AND coalesce(trim(image_path), '') = '' AS r2,
        question IS NULL OR trim(question) = '' AS r3,
        options_text = '' AS r4,
        options_text <> '' AND option_list IS NULL AS r5,
        option_list IS NOT NULL AND options_text <> '' AND len(option_list) < 2 AS r6,
        option_list IS NOT NULL AND len(option_list) > 26 AS r7,
        option_list IS NOT NULL AND options_text <> '' AND list_contains(option_list, '') AS r8,
        option_list IS NOT NULL AND len(list_distinct(option_list)) <> len(option_list) AS r9,
        answer_text = '' AS r10,
        option_list IS NOT NULL AND answer_text <> '' AND answer_index IS NULL AS r11,
        axis IS NULL OR trim(axis) = '' AS r12,
        task IS NULL OR trim(task) = '' AS r13,
        list_count(list_filter(string_split(coalesce("group", ''), ';'),
                               x -> contains(x, '=') AND (trim(split_part(x, '=', 1)) = ''
                                                          OR trim(split_part(x, '=', 2)) = ''))) > 0 AS r14,
        trim(item_id) <> '' AND (item_id < '!' OR suffix(item_id, ' ') OR suffix(item_id, chr(9))
                                  OR suffix(item_id, chr(160)) OR prefix(item_id, chr(160))) AS r15,
        length(coalesce(question, '')) + coalesce(list_sum(list_transform(option_list, x -> length(x))), 0)
            AS prompt_chars
    FROM parsed_benchmark
),
duplicates AS (
    SELECT item_id, min(row_index) AS row_index
    FROM parsed_benchmark
    WHERE item_id IS NOT NULL AND trim(item_id) <> ''
    GROUP BY item_id
    HAVING count(*) > 1
),
rules AS (
    SELECT 1 AS rule_order, 'item_id' AS column_name, 'must not be empty' AS rule, row_index, item_id,
           NULL AS bad_value, count(*) OVER () AS n_rows FROM checked WHERE r1
    UNION ALL SELECT 2, 'image_id', 'each item needs an image_id (an image of the lake) or an image_path', row_index,
        item_id, NULL, count(*) OVER () FROM checked WHERE r2
    UNION ALL SELECT 3, 'question', 'must not be empty', row_index, item_id, NULL, count(*) OVER () FROM checked WHERE r3
    UNION ALL SELECT 4, 'options', 'must not be empty', row_index, item_id, NULL, count(*) OVER () FROM checked WHERE r4
    UNION ALL SELECT 5, 'options', 'must be a JSON list of strings (["a", "b"]) or the options joined by ''|''',
        row_index, item_id, options_text, count(*) OVER () FROM checked WHERE r5
    UNION ALL SELECT 6, 'options', 'an item needs at least two options', row_index, item_id, options_text,
        count(*) OVER () FROM checked WHERE r6
    UNION ALL SELECT 7, 'options', 'at most 26 options (lettered A to Z in the prompt)', row_index, item_id,
        CAST(len(option_list) AS VARCHAR), count(*) OVER () FROM checked WHERE r7
    UNION ALL SELECT 8, 'options', 'an option must not be empty', row_index, item_id, options_text,
        count(*) OVER () FROM checked WHERE r8
    UNION ALL SELECT 9, 'options', 'options of an item must be distinct', row_index, item_id, options_text,
        count(*) OVER () FROM checked WHERE r9
    UNION ALL SELECT 10, 'answer', 'must not be empty', row_index, item_id, NULL, count(*) OVER () FROM checked WHERE r10
    UNION ALL SELECT 11, 'answer', 'must be one of the item''s options (its text, or its letter A, B, ...)', row_index,
        item_id, answer_text, count(*) OVER () FROM checked WHERE r11
    UNION ALL SELECT 12, 'axis', 'must not be empty', row_index, item_id, NULL, count(*) OVER () FROM checked WHERE r12
    UNION ALL SELECT 13, 'task', 'must not be empty', row_index, item_id, NULL, count(*) OVER () FROM checked WHERE r13
    UNION ALL SELECT 14, 'group', 'a "grouping=value" pair needs both a grouping and a value', row_index, item_id,
        "group", count(*) OVER () FROM checked WHERE r14
    UNION ALL SELECT 15, 'item_id', 'must not begin or end with whitespace', row_index, item_id, item_id,
        count(*) OVER () FROM checked WHERE r15
    UNION ALL SELECT 16, 'item_id', 'one row per item: duplicate item_id', row_index, item_id, NULL,
        count(*) OVER () FROM duplicates
    UNION ALL SELECT 17, 'question', 'the question and its options must be at most ' || CAST($max_prompt_chars AS VARCHAR)
        || ' characters together (a model''s memory grows with the square of the prompt)', row_index, item_id,
        CAST(prompt_chars AS VARCHAR) || ' characters', count(*) OVER () FROM checked
        WHERE prompt_chars > $max_prompt_chars
)
SELECT rule_order, column_name, rule, row_index, item_id, bad_value, n_rows
FROM rules
QUALIFY row_number() OVER (PARTITION BY rule_order ORDER BY row_index) = 1
ORDER BY rule_order
