-- Twin: none in sql/. In process the same weights are hashed in C or numpy (autheval/estimation/bootstrap.py,
-- `poisson_weights`); tests/sql/replicates_poisson.sql (the DuckDB form, generate_series) and
-- tests/sql/portable_poisson_weights.sql (the weights as a table) are the tests' oracles.
-- Replicate sums of the `poisson` scheme in the portable subset: the replicates taken from a joined
-- table replicate_ids(rep) instead of DuckDB's generate_series (which Spark lacks), the point
-- (rep = -1, every cluster once) in the same pass, the weights identical on every engine. The weights are generated inside the
-- query (a cross join of the clusters with the replicate ids): nothing of size clusters x replicates
-- is stored. Input: cluster_stats, replicate_ids(rep); parameter $seed. Output: the replicates_point
-- layout.
WITH keyed AS (
    SELECT
        CAST(rep AS BIGINT) AS rep,
        (CAST(rep AS BIGINT) * 48271 + CAST($seed AS BIGINT) % 2147483647) % 2147483647 AS rep_key
    FROM replicate_ids
),
hashed AS (
    SELECT
        s.*,
        k.rep,
        k.rep_key,
        (k.rep_key * 69621 + CAST(s.cluster_rank AS BIGINT)) % 2147483647 AS h1
    FROM cluster_stats AS s
    CROSS JOIN keyed AS k
),
uniform AS (
    SELECT
        *,
        CAST((((h1 * h1 + rep_key) % 2147483647) * 48271 + 12345) % 2147483647 AS DOUBLE)
            / CAST(2147483647 AS DOUBLE) AS u
    FROM hashed
),
weighted AS (
    SELECT
        *,
        CAST(CASE
            WHEN rep < 0 THEN 1
            WHEN u < 3.6787944117144233e-1 THEN 0
            WHEN u < 7.357588823428847e-1 THEN 1
            WHEN u < 9.196986029286058e-1 THEN 2
            WHEN u < 9.810118431238463e-1 THEN 3
            WHEN u < 9.963401531726563e-1 THEN 4
            WHEN u < 9.994058151824183e-1 THEN 5
            WHEN u < 9.99916758850712e-1 THEN 6
            WHEN u < 9.999897508033253e-1 THEN 7
            WHEN u < 9.99998874797402e-1 THEN 8
            WHEN u < 9.999998885745216e-1 THEN 9
            WHEN u < 9.999999899522336e-1 THEN 10
            ELSE 11
        END AS DOUBLE) AS mult
    FROM uniform
    WHERE rep < 0 OR u >= 3.6787944117144233e-1  -- weight 0 (about 37% of pairs) adds nothing
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
