-- Twin: estimates/evaluator_clusters.sql (the in-process DuckDB). Differs: sum here, fsum there (checked 1e-12).
-- The `evaluator` scheme's per-metric clusters in the portable subset: estimates/evaluator_clusters.sql with
-- plain `sum` where it uses DuckDB's compensated `fsum` (the two agree to rounding; the engine matrix
-- checks 1e-12). Each metric has its own per-case values, its own resampling stream (seed + offset)
-- and, for delta, its own cluster set (intervened rows only). Input: records. Output: one row per
-- analysis, metric and cluster (ascending cluster_id) with the stream's cluster count and the cluster's
-- rank, sum of values (s), case count (n), and the cluster unit's terms m and k (estimates/evaluator_clusters.sql:
-- the mean and 1; for delta the gap over all the cluster's cases and its share of changed cases).
-- Unavailable scores are 0.0 here; the caller masks those metrics.
WITH metric_names AS (  -- each metric's stream offset: its seed is the scheme's seed + offset
    SELECT * FROM (VALUES
        (0, 'J'),
        (1, 'intervention_rate'),
        (2, 'J_auth'),
        (3, 'Delta_authority'),
        (4, 'delta'),
        (5, 'J_std'),
        (6, 'Delta_total'),
        (7, 'Delta_utility')
    ) AS names(seed_offset, metric)
),
case_values AS (  -- every case once per metric (delta: the intervened cases), with that metric's value
    SELECT
        r.analysis,
        r.cluster_id,
        m.metric,
        m.seed_offset,
        coalesce(CASE m.seed_offset
            WHEN 0 THEN r.utility_executed_local
            WHEN 1 THEN CAST(r.intervened AS DOUBLE)
            WHEN 2 THEN r.utility_proposed_local
            WHEN 3 THEN r.utility_proposed_local - r.utility_executed_local
            WHEN 4 THEN r.utility_proposed_local - r.utility_executed_local
            WHEN 5 THEN r.utility_proposed_global
            WHEN 6 THEN r.utility_proposed_global - r.utility_executed_local
            WHEN 7 THEN r.utility_proposed_global - r.utility_proposed_local
        END, 0.0) AS value
    FROM records AS r
    CROSS JOIN metric_names AS m
    WHERE m.metric <> 'delta' OR r.intervened
),
per_cluster AS (
    SELECT analysis, metric, seed_offset, cluster_id, CAST(count(*) AS DOUBLE) AS n, sum(value) AS s
    FROM case_values
    GROUP BY analysis, metric, seed_offset, cluster_id
),
sizes AS (  -- every case of a cluster: the cluster unit's denominator for delta
    SELECT analysis, cluster_id, CAST(count(*) AS DOUBLE) AS cases
    FROM records
    GROUP BY analysis, cluster_id
)
SELECT
    c.analysis,
    c.metric,
    c.seed_offset,
    CAST(count(*) OVER (PARTITION BY c.analysis, c.metric) AS INTEGER) AS n_clusters,
    CAST(row_number() OVER (PARTITION BY c.analysis, c.metric ORDER BY c.cluster_id) - 1 AS INTEGER)
        AS cluster_rank,
    c.s,
    c.n,
    CASE WHEN c.metric = 'delta' THEN c.s / z.cases ELSE c.s / c.n END AS m,
    CASE WHEN c.metric = 'delta' THEN c.n / z.cases ELSE CAST(1 AS DOUBLE) END AS k
FROM per_cluster AS c
JOIN sizes AS z ON z.analysis = c.analysis AND z.cluster_id = c.cluster_id
