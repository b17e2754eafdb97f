-- May a new landed file join the landed logs? Inputs: landed_before(landed_key, landed_file, site, period,
-- case_id, supersedes), every landed row so far; landed_new(site, period, case_id), the new file's rows
-- (a case is a site's case_id within one period: a site may number its cases anew each month); $supersedes, the
-- content key the new file declares it replaces (NULL: none). One row: the rule broken first (NULL when
-- none), an example, how many rows break it. A file superseded by a later one no longer counts; the file
-- a correction supersedes does not count against it (autheval.monitoring.landing.check_landing).
WITH superseded AS (
    SELECT DISTINCT supersedes AS landed_key FROM landed_before WHERE supersedes IS NOT NULL
),
target AS (
    SELECT
        CAST($supersedes AS VARCHAR) AS landed_key,
        EXISTS (SELECT 1 FROM landed_before AS b WHERE b.landed_key = CAST($supersedes AS VARCHAR)) AS landed,
        (
            SELECT min(b.landed_key) FROM landed_before AS b WHERE b.supersedes = CAST($supersedes AS VARCHAR)
        ) AS superseded_by
),
current_rows AS (
    SELECT b.*
    FROM landed_before AS b
    WHERE b.landed_key NOT IN (SELECT landed_key FROM superseded)
        AND b.landed_key IS DISTINCT FROM CAST($supersedes AS VARCHAR)
),
clashes AS (
    SELECT n.site, n.period, n.case_id, min(c.landed_file) AS landed_file, min(c.landed_key) AS landed_key
    FROM landed_new AS n
    JOIN current_rows AS c ON c.site = n.site AND c.period = n.period AND c.case_id = n.case_id
    GROUP BY n.site, n.period, n.case_id
)
SELECT
    CASE
        WHEN t.landed_key IS NOT NULL AND NOT t.landed THEN 'supersedes'
        WHEN t.superseded_by IS NOT NULL THEN 'superseded'
        WHEN (SELECT count(*) FROM clashes) > 0 THEN 'case_id'
    END AS broken,
    t.superseded_by,
    (SELECT count(*) FROM clashes) AS clashes,
    (SELECT site FROM clashes ORDER BY site, period, case_id LIMIT 1) AS site,
    (SELECT period FROM clashes ORDER BY site, period, case_id LIMIT 1) AS period,
    (SELECT case_id FROM clashes ORDER BY site, period, case_id LIMIT 1) AS case_id,
    (SELECT landed_file FROM clashes ORDER BY site, period, case_id LIMIT 1) AS landed_file,
    (SELECT landed_key FROM clashes ORDER BY site, period, case_id LIMIT 1) AS clash_key
FROM target AS t
