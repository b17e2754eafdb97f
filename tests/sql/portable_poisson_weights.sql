-- Test oracle (tests/test_engines.py): the poisson weights as a table, so that the engine matrix can
-- compare every weight across engines; no estimator reads weights as a table.
-- The `poisson` scheme's replicate weights as a table: the Poisson(1) weight of every cluster rank in
-- every replicate of replicate_ids, from the integer-only hash of replicates_poisson.sql (the same
-- weights, bit for bit: estimates/portable_replicates_poisson.sql uses this hash, and the engine matrix checks
-- that both engines give every weight identically). rep = -1 is the point: weight 1 for every rank.
-- Portable: integer arithmetic only, every intermediate below 2^62 (no engine hash function: DuckDB's
-- hash() is 64-bit, Spark's a 32-bit Murmur3); u = k / 2147483647 with k an integer, compared with
-- the Poisson(1) CDF at 0..10 written as DOUBLE literals (exponent notation: Spark reads 0.5 as a
-- DECIMAL); weights above 11 (probability 1e-9) count as 11.
-- Input: cluster_stats (the ranks), replicate_ids(rep); parameter $seed.
-- Output: n_clusters, rep, cluster_rank, mult (DOUBLE), only where mult > 0.
WITH ranks AS (
    SELECT DISTINCT n_clusters, cluster_rank FROM cluster_stats
),
keyed AS (
    SELECT
        CAST(rep AS BIGINT) AS rep,
        (CAST(rep AS BIGINT) * 48271 + CAST($seed AS BIGINT) % 2147483647) % 2147483647 AS rep_key
    FROM replicate_ids
),
hashed AS (
    SELECT
        k.rep,
        r.n_clusters,
        r.cluster_rank,
        k.rep_key,
        (k.rep_key * 69621 + CAST(r.cluster_rank AS BIGINT)) % 2147483647 AS h1
    FROM ranks AS r
    CROSS JOIN keyed AS k
),
uniform AS (
    SELECT
        rep,
        n_clusters,
        cluster_rank,
        CAST((((h1 * h1 + rep_key) % 2147483647) * 48271 + 12345) % 2147483647 AS DOUBLE)
            / CAST(2147483647 AS DOUBLE) AS u
    FROM hashed
)
SELECT
    n_clusters,
    rep,
    cluster_rank,
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
