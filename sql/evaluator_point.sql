-- The `evaluator` scheme's point estimates in the layout of its replicate sums (rep = -1): every
-- cluster of a metric's stream counted once. Input: evaluator_clusters. Output: analysis, metric, rep,
-- w_s (sum of values), w_n (case count), c_m (sum of cluster means), c_n (cluster count).
-- fsum is DuckDB's compensated sum; use sum elsewhere.
SELECT
    analysis,
    metric,
    CAST(-1 AS BIGINT) AS rep,
    fsum(s) AS w_s,
    sum(n) AS w_n,
    fsum(m) AS c_m,
    CAST(count(*) AS DOUBLE) AS c_n
FROM evaluator_clusters
GROUP BY analysis, metric
