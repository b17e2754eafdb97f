-- A validated proposals file in the `proposals` contract: mechanism, image_id, slate (ranked actions),
-- a_head, p_very_low, p_low, p_moderate, p_high, diagnosis, source. The ranking comes from, per row:
--   * the four probabilities: stable descending order, ties to the lower level;
--   * an explicit slate: as given;
--   * only a_head: AuthEval spec 5.5's nearest-level rule, (|level - head|, then the higher level).
-- Input: raw_proposals (as in proposals/proposals_file_validate.sql, already valid); $source.
WITH typed AS (
    SELECT
        row_index, trim(mechanism) AS mechanism, trim(image_id) AS image_id, upper(trim(diagnosis)) AS diagnosis,
        CAST(substr(a_head, 2) AS INTEGER) AS head_level,
        CAST(p_very_low AS DOUBLE) AS p_very_low, CAST(p_low AS DOUBLE) AS p_low,
        CAST(p_moderate AS DOUBLE) AS p_moderate, CAST(p_high AS DOUBLE) AS p_high,
        list_filter(string_split(regexp_replace(trim(coalesce(slate, '')), '[\s,;]+', ' ', 'g'), ' '),
                    x -> x <> '') AS items
    FROM raw_proposals
),
ranked AS (
    SELECT
        *,
        CASE
            WHEN len(items) > 0 THEN items
            WHEN p_very_low IS NOT NULL THEN list_transform(
                list_sort(list_transform([0, 1, 2, 3], k -> {
                    'descending_p': -[p_very_low, p_low, p_moderate, p_high][k + 1], 'level': k})),
                x -> 'a' || x.level)
            ELSE list_transform(
                list_sort(list_transform([0, 1, 2, 3], k -> {
                    'distance': abs(k - head_level), 'descending_level': -k})),
                x -> 'a' || (-x.descending_level))
        END AS slate
    FROM typed
)
SELECT
    mechanism, image_id, slate, slate[1] AS a_head,
    p_very_low, p_low, p_moderate, p_high, diagnosis,
    CAST($source AS VARCHAR) AS source
FROM ranked
ORDER BY row_index
