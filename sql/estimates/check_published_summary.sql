-- Asset check: the reference analysis equals the published authority_summary.csv (AuthEval
-- medgemma_workshop_minimal) in every filled cell. Input: estimates, published (the embedded summary).
-- The published intervals come from 5000 replicates: they are compared when the estimates drew as many
-- (`autheval demo --reps N` with another N changes the intervals only; then the points are compared).
WITH ours AS (
    SELECT metric, unit, estimate, ci_lower, ci_upper, reps = 5000 AS published_reps
    FROM estimates
    WHERE analysis = 'mixed' AND scheme = 'reference'
),
theirs AS (
    SELECT 'image_weighted' AS unit, m.metric, m.estimate, m.ci_lower, m.ci_upper
    FROM published AS p,
         LATERAL (VALUES
             ('J_auth', p."J_auth", p."J_auth_ci_lower", p."J_auth_ci_upper"),
             ('J', p."J", p."J_ci_lower", p."J_ci_upper"),
             ('intervention_rate', p.intervention_rate, p.intervention_rate_ci_lower,
              p.intervention_rate_ci_upper),
             ('delta', p.delta, p.delta_ci_lower, p.delta_ci_upper),
             ('Delta_authority', p."Delta_authority", p."Delta_authority_ci_lower",
              p."Delta_authority_ci_upper")
         ) AS m(metric, estimate, ci_lower, ci_upper)
    WHERE p.estimand = 'image_weighted_primary'
    UNION ALL
    SELECT 'cluster_equal', 'Delta_authority', p."Delta_authority", p."Delta_authority_ci_lower",
           p."Delta_authority_ci_upper"
    FROM published AS p
    WHERE p.estimand = 'cluster_equal_sensitivity'
)
SELECT
    count(*) AS metrics_compared,
    max(greatest(abs(o.estimate - t.estimate),
                 CASE WHEN o.published_reps
                      THEN greatest(abs(o.ci_lower - t.ci_lower), abs(o.ci_upper - t.ci_upper))
                      ELSE 0 END)) AS max_abs_difference,
    count(*) FILTER (WHERE o.estimate IS NULL) AS missing,
    count(*) FILTER (WHERE o.published_reps) AS intervals_compared
FROM theirs AS t
LEFT JOIN ours AS o USING (unit, metric)
