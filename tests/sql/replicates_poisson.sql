-- Test oracle (tests/test_poisson.py, tests/test_engines.py): the in-process estimators hash these
-- weights in C or numpy (autheval/estimation/bootstrap.py), another engine runs sql/estimates/portable_replicates_poisson.sql;
-- this DuckDB form (generate_series) pins both.
-- Replicate sums of the `poisson` scheme: every cluster gets an independent Poisson(1) weight per
-- replicate, generated inside the query from an integer hash of (seed, rep, cluster_rank). No weights
-- table is stored, memory stays constant, and the SQL is portable (DuckDB and Spark give the same
-- weights: integer arithmetic only, every intermediate below 2^62, no engine hash function).
-- This is a different (asymptotically equivalent) bootstrap from the exact numpy-stream schemes.
-- A replicate's weights depend only on (seed, rep, cluster_rank), so replicates can be computed in
-- blocks: this query makes replicates $first_rep ... $first_rep + $reps - 1.
-- Weights: the Poisson(1) quantile of u, a uniform on the grid k / 2147483647 (thresholds: the
-- Poisson(1) CDF at 0..10, e^-1 * sum_{j<=k} 1/j!; weights above 11 (probability 1e-9) are cut to 11).
-- Input: cluster_stats; parameters $first_rep, $reps, $seed. Output: the layout of estimates/replicates_point.sql.
WITH reps AS (
    SELECT
        CAST(rep AS BIGINT) AS rep,
        (CAST(rep AS BIGINT) * 48271 + CAST($seed AS BIGINT) % 2147483647) % 2147483647 AS rep_key
    FROM generate_series(CAST($first_rep AS BIGINT), CAST($first_rep AS BIGINT) + CAST($reps AS BIGINT) - 1)
        AS t(rep)
),
mixed AS (
    SELECT
        s.*,
        r.rep,
        r.rep_key,
        (r.rep_key * 69621 + CAST(s.cluster_rank AS BIGINT)) % 2147483647 AS h1
    FROM cluster_stats AS s
    CROSS JOIN reps AS r
),
mixed2 AS (
    SELECT *, (h1 * h1 + rep_key) % 2147483647 AS h2
    FROM mixed
),
weighted AS (
    SELECT
        *,
        CASE
            WHEN u < 0.36787944117144233 THEN 0.0
            WHEN u < 0.7357588823428847 THEN 1.0
            WHEN u < 0.9196986029286058 THEN 2.0
            WHEN u < 0.9810118431238463 THEN 3.0
            WHEN u < 0.9963401531726563 THEN 4.0
            WHEN u < 0.9994058151824183 THEN 5.0
            WHEN u < 0.999916758850712 THEN 6.0
            WHEN u < 0.9999897508033253 THEN 7.0
            WHEN u < 0.999998874797402 THEN 8.0
            WHEN u < 0.9999998885745216 THEN 9.0
            WHEN u < 0.9999999899522336 THEN 10.0
            ELSE 11.0
        END AS mult
    FROM (
        SELECT *, CAST((h2 * 48271 + 12345) % 2147483647 AS DOUBLE) / 2147483647.0 AS u
        FROM mixed2
    ) AS hashed
    WHERE u >= 0.36787944117144233  -- weight 0 (about 37% of pairs) adds nothing: skip it
)
SELECT
    analysis,
    rep,
    sum(mult * n) AS w_n,
    sum(mult * sum_changed) AS w_changed,
    sum(mult * sum_exec) AS w_exec,
    sum(mult * sum_prop) AS w_prop,
    sum(mult * sum_gap) AS w_gap,
    sum(mult * sum_glob) AS w_glob,
    sum(mult * sum_total_gap) AS w_total_gap,
    sum(mult * sum_utility_gap) AS w_utility_gap,
    sum(mult) AS c_n,
    sum(mult * sum_changed / n) AS c_changed,
    sum(mult * sum_exec / n) AS c_exec,
    sum(mult * sum_prop / n) AS c_prop,
    sum(mult * sum_gap / n) AS c_gap,
    sum(mult * sum_glob / n) AS c_glob,
    sum(mult * sum_total_gap / n) AS c_total_gap,
    sum(mult * sum_utility_gap / n) AS c_utility_gap
FROM weighted
GROUP BY analysis, rep
