-- Rule violations of a user's proposals file: the first offending row per broken rule, in rule order.
-- Input: raw_proposals(row_index, mechanism, image_id, slate, a_head, p_very_low, p_low, p_moderate,
--        p_high, diagnosis), all text; known_images(image_id) (empty when the image set is not known
--        yet); known_diagnoses(diagnosis) (the ISIC 2019 codes);
--        $check_images (whether known_images is the evaluated image set).
-- Output: rule_order, column_name, rule, row_index, image_id, bad_value, n_rows.
-- A row gives its ranking in one of three forms: the four probabilities, an explicit `slate`
-- ("a2 a1 a3 a0", length 2 or 4, a permutation of distinct actions), or only `a_head`.
-- A mechanism or image id that begins or ends with whitespace (rules 14, 15) is refused, never
-- stripped: `m ` beside `m` would be two mechanisms (and one analysis twice downstream), `i1 ` an image
-- the lake does not know. They are reported right after the empty ones, then a control character inside
-- either (rules 16, 17: a newline in a mechanism name broke tables, reports and SQL text downstream).
WITH typed AS (
    SELECT
        row_index, mechanism, image_id, slate, a_head, upper(trim(diagnosis)) AS diagnosis,
        [p_very_low, p_low, p_moderate, p_high] AS p_text,
        [TRY_CAST(p_very_low AS DOUBLE), TRY_CAST(p_low AS DOUBLE), TRY_CAST(p_moderate AS DOUBLE),
         TRY_CAST(p_high AS DOUBLE)] AS p,
        string_split(regexp_replace(trim(coalesce(slate, '')), '[\s,;]+', ' ', 'g'), ' ') AS slate_items
    FROM raw_proposals
),
flagged AS (
    SELECT
        *,
        list_count(list_filter(p_text, x -> x IS NOT NULL)) AS n_p,
        list_filter(slate_items, x -> x <> '') AS items
    FROM typed
),
checked AS (
    SELECT
        *,
        mechanism IS NULL OR trim(mechanism) = '' AS r1,
        image_id IS NULL OR trim(image_id) = '' AS r2,
        n_p NOT IN (0, 4) AS r3,
        n_p = 4 AND list_count(list_filter(p, x -> x IS NOT NULL AND isfinite(x))) < 4 AS r4,
        n_p = 4 AND list_count(list_filter(p, x -> x < 0)) > 0 AS r5,
        n_p = 4 AND abs(list_sum(p) - 1.0) > 1e-6 AS r6,
        len(items) > 0 AND (len(items) NOT IN (2, 4)
            OR list_count(list_filter(items, x -> x NOT IN ('a0', 'a1', 'a2', 'a3'))) > 0
            OR len(list_distinct(items)) <> len(items)) AS r7,
        a_head IS NOT NULL AND a_head NOT IN ('a0', 'a1', 'a2', 'a3') AS r8,
        n_p = 0 AND len(items) = 0 AND a_head IS NULL AS r9,
        a_head IN ('a0', 'a1', 'a2', 'a3') AND len(items) IN (2, 4) AND items[1] <> a_head AS r10,
        $check_images AND image_id IS NOT NULL
            AND image_id NOT IN (SELECT image_id FROM known_images) AS r12,
        diagnosis IS NOT NULL AND diagnosis NOT IN (SELECT diagnosis FROM known_diagnoses) AS r13,
        trim(mechanism) <> '' AND (mechanism < '!' OR prefix(mechanism, chr(160)) OR suffix(mechanism, ' ')
            OR suffix(mechanism, chr(9)) OR suffix(mechanism, chr(10)) OR suffix(mechanism, chr(13))
            OR suffix(mechanism, chr(160))) AS r14,
        trim(image_id) <> '' AND (image_id < '!' OR prefix(image_id, chr(160)) OR suffix(image_id, ' ')
            OR suffix(image_id, chr(9)) OR suffix(image_id, chr(10)) OR suffix(image_id, chr(13))
            OR suffix(image_id, chr(160))) AS r15,
        regexp_matches(mechanism, '[[:cntrl:]]') AS r16,
        regexp_matches(image_id, '[[:cntrl:]]') AS r17
    FROM flagged
),
duplicates AS (
    SELECT mechanism, image_id, min(row_index) AS row_index, count(*) AS n
    FROM raw_proposals
    WHERE mechanism IS NOT NULL AND image_id IS NOT NULL
    GROUP BY ALL
    HAVING count(*) > 1
),
rules AS (
    SELECT 1 AS rule_order, 'mechanism' AS column_name, 'must not be empty' AS rule, row_index, image_id,
           NULL AS bad_value, count(*) OVER () AS n_rows FROM checked WHERE r1
    UNION ALL SELECT 2, 'image_id', 'must not be empty', row_index, image_id, NULL, count(*) OVER ()
        FROM checked WHERE r2
    UNION ALL SELECT 3, 'p_very_low', 'give all four probabilities (p_very_low, p_low, p_moderate, p_high) or none',
        row_index, image_id, CAST(n_p AS VARCHAR) || ' of 4 given', count(*) OVER () FROM checked WHERE r3
    UNION ALL SELECT 4, 'p_very_low', 'probabilities must be finite numbers', row_index, image_id,
        array_to_string(p_text, ' '), count(*) OVER () FROM checked WHERE r4
    UNION ALL SELECT 5, 'p_very_low', 'probabilities must not be negative', row_index, image_id,
        array_to_string(p_text, ' '), count(*) OVER () FROM checked WHERE r5 AND NOT r4
    UNION ALL SELECT 6, 'p_very_low', 'probabilities must sum to 1 within 1e-6', row_index, image_id,
        CAST(list_sum(p) AS VARCHAR), count(*) OVER () FROM checked WHERE r6 AND NOT r4
    UNION ALL SELECT 7, 'slate', 'must be 2 or 4 distinct actions among a0 a1 a2 a3, best first (e.g. "a2 a1 a3 a0")',
        row_index, image_id, slate, count(*) OVER () FROM checked WHERE r7
    UNION ALL SELECT 8, 'a_head', 'must be one of a0, a1, a2, a3', row_index, image_id, a_head, count(*) OVER ()
        FROM checked WHERE r8
    UNION ALL SELECT 9, 'a_head', 'each row needs the four probabilities, a slate or an a_head', row_index,
        image_id, NULL, count(*) OVER () FROM checked WHERE r9
    UNION ALL SELECT 10, 'a_head', 'must be the first action of the slate', row_index, image_id,
        a_head || ' vs ' || slate, count(*) OVER () FROM checked WHERE r10 AND NOT r7
    UNION ALL SELECT 11, 'image_id', 'one row per (mechanism, image_id): duplicate', row_index, image_id,
        mechanism, count(*) OVER () FROM duplicates
    UNION ALL SELECT 12, 'image_id', 'unknown image id (not in the lake''s images)', row_index, image_id,
        NULL, count(*) OVER () FROM checked WHERE r12
    UNION ALL SELECT 13, 'diagnosis', 'must be an ISIC 2019 diagnosis code (' ||
        (SELECT string_agg(diagnosis, ' ' ORDER BY diagnosis) FROM known_diagnoses) || ')', row_index,
        image_id, diagnosis, count(*) OVER () FROM checked WHERE r13
    UNION ALL SELECT 14, 'mechanism', 'must not begin or end with whitespace (it would be another mechanism than '
        || 'the same name without it)', row_index, image_id, mechanism, count(*) OVER () FROM checked WHERE r14
    UNION ALL SELECT 15, 'image_id', 'must not begin or end with whitespace (it would be another image than the '
        || 'same id without it)', row_index, image_id, image_id, count(*) OVER () FROM checked WHERE r15
    UNION ALL SELECT 16, 'mechanism', 'must not hold a control character (a newline, tab, NUL ...: a mechanism '
        || 'is a name in tables, reports and SQL)', row_index, image_id, mechanism, count(*) OVER ()
        FROM checked WHERE r16 AND NOT r14
    UNION ALL SELECT 17, 'image_id', 'must not hold a control character (a newline, tab, NUL ...)', row_index,
        image_id, image_id, count(*) OVER () FROM checked WHERE r17 AND NOT r15
)
SELECT rule_order, column_name, rule, row_index, image_id, bad_value, n_rows
FROM rules
QUALIFY row_number() OVER (PARTITION BY rule_order ORDER BY row_index) = 1
ORDER BY CASE rule_order WHEN 14 THEN 2.1 WHEN 15 THEN 2.2 WHEN 16 THEN 2.3 WHEN 17 THEN 2.4 ELSE rule_order END
