-- A benchmark file's rows parsed (autheval/estimation/benchmark.py): the options as a list, the answer's position.
-- Input: raw_benchmark(row_index, item_id, image_id, image_path, question, options, answer, axis, task,
--        "group"), all text (a Parquet list of options arrives as its JSON text).
-- options: a JSON list of strings (["melanoma", "nevus"]) or the options joined by '|'
-- ("melanoma | nevus"); each option trimmed. answer: an option's text, or its letter (A, B, ...) when no
-- option has that text; answer_index counts from 0. NULL option_list: options that are not a JSON list
-- of strings. The rules are sql/proposals/benchmark_validate.sql's.
WITH parsed AS (
    SELECT
        *,
        trim(coalesce(options, '')) AS options_text,
        CASE
            WHEN prefix(trim(coalesce(options, '')), '[') THEN
                CASE WHEN json_valid(trim(options)) AND json_type(trim(options)) = 'ARRAY' THEN
                    CASE WHEN list_count(list_filter(CAST(json_extract(trim(options), '$[*]') AS JSON[]),
                                                     x -> json_type(x) <> 'VARCHAR')) = 0
                         THEN list_transform(CAST(json_extract_string(trim(options), '$[*]') AS VARCHAR[]),
                                             x -> trim(x))
                    END
                END
            ELSE list_transform(string_split(trim(coalesce(options, '')), '|'), x -> trim(x))
        END AS option_list,
        trim(coalesce(answer, '')) AS answer_text
    FROM raw_benchmark
)
SELECT
    *,
    CAST(coalesce(
        list_position(option_list, answer_text),
        CASE WHEN length(answer_text) = 1
                  AND instr('ABCDEFGHIJKLMNOPQRSTUVWXYZ', upper(answer_text)) BETWEEN 1 AND len(option_list)
             THEN instr('ABCDEFGHIJKLMNOPQRSTUVWXYZ', upper(answer_text)) END
    ) - 1 AS INTEGER) AS answer_index
FROM parsed
