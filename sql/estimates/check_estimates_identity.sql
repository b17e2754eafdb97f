-- Asset check: Delta = p * delta on every reported estimate pair, both units, every scheme (a scheme
-- changes intervals only; every scheme's point estimates are one computation). Input: estimates.
WITH wide AS (
    SELECT
        analysis,
        unit,
        any_value(estimate) FILTER (WHERE metric = 'Delta_authority') AS gap,
        any_value(estimate) FILTER (WHERE metric = 'intervention_rate') AS p,
        any_value(estimate) FILTER (WHERE metric = 'delta') AS d
    FROM estimates
    GROUP BY analysis, unit
)
SELECT coalesce(max(abs(gap - p * d)), 0.0) AS max_residual, count(*) AS pairs
FROM wide
WHERE gap IS NOT NULL AND d IS NOT NULL
