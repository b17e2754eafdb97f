-- A synthetic role-separated log for scale benchmarks: cases $first_case .. $first_case + $n_cases - 1
-- of a log of $n_clusters clusters (case i in cluster i mod $n_clusters), about 30% of proposals
-- replaced, utilities on AuthEval's scale. Deterministic (a hash of the case number, no random()), so
-- a folder of parts (benchmarks/scale.py, $first_case = each part's first case) holds, row for row,
-- the log written at once ($first_case = 0).
WITH cases AS (
    SELECT CAST(i AS BIGINT) AS i
    FROM generate_series(CAST($first_case AS BIGINT),
                         CAST($first_case AS BIGINT) + CAST($n_cases AS BIGINT) - 1) AS t(i)
),
drawn AS (
    SELECT
        i,
        (i * 2654435761) % 4294967291 AS h,
        i % CAST($n_clusters AS BIGINT) AS k
    FROM cases
)
SELECT
    'case' || lpad(CAST(i AS VARCHAR), 9, '0') AS case_id,
    'cluster' || lpad(CAST(k AS VARCHAR), 8, '0') AS cluster_id,
    'a' || CAST(h % 4 AS VARCHAR) AS proposed_action,
    CASE WHEN h % 10 < 3 THEN 'a' || CAST((h // 4) % 4 AS VARCHAR) ELSE 'a' || CAST(h % 4 AS VARCHAR) END
        AS executed_action,
    -CAST((h // 16) % 50 AS DOUBLE) / 10.0 AS utility_executed_local,
    CASE WHEN h % 10 < 3 AND (h // 4) % 4 <> h % 4 THEN -CAST((h // 800) % 60 AS DOUBLE) / 10.0
         ELSE -CAST((h // 16) % 50 AS DOUBLE) / 10.0 END AS utility_proposed_local
FROM drawn
