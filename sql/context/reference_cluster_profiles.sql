-- reference_cluster_profiles: the workflow profiles each reference cluster's published utilities
-- allow (AuthEval spec 3.2, 3.4): a profile fits when, with the cluster's private factors, it gives
-- every U_z of both actions in all six traces to 1e-9. One row per fitting (cluster, profile);
-- n_fitting = 1 means the traces identify the profile (1,607 of 2,090 test clusters).
-- Input: reference_traces, images(image_id, risk_stratum), contexts(cluster_id, sens, burden,
-- aversion), rule_profiles, rule_factor_levels, rule_risk_levels.
WITH candidate_weights AS (
    SELECT
        c.cluster_id,
        p.profile,
        p.w_under * fs.w_under AS w_under,
        ((p.w_over * fs.w_over) * fb.w_over) * fa.w_over AS w_over
    FROM contexts AS c
    CROSS JOIN rule_profiles AS p
    JOIN rule_factor_levels AS fs ON fs.factor = 'sens' AND fs.level = c.sens
    JOIN rule_factor_levels AS fb ON fb.factor = 'burden' AND fb.level = c.burden
    JOIN rule_factor_levels AS fa ON fa.factor = 'aversion' AND fa.level = c.aversion
),
published AS (
    SELECT t.cluster_id, r.level AS y, r.severity, CAST(substr(t.a_head, 2) AS INTEGER) AS a, t."Uz_head" AS u
    FROM reference_traces AS t
    JOIN images AS i ON i.image_id = t.image_id
    JOIN rule_risk_levels AS r ON r.risk_level = i.risk_stratum
    UNION ALL
    SELECT t.cluster_id, r.level AS y, r.severity, CAST(substr(t.a_exec, 2) AS INTEGER) AS a, t."Uz_exec" AS u
    FROM reference_traces AS t
    JOIN images AS i ON i.image_id = t.image_id
    JOIN rule_risk_levels AS r ON r.risk_level = i.risk_stratum
),
fits AS (
    SELECT
        w.cluster_id,
        w.profile,
        bool_and(abs(
            CASE
                WHEN v.a < v.y THEN ((-w.w_under) * v.severity) * (v.y - v.a)
                WHEN v.a > v.y THEN (-w.w_over) * (v.a - v.y)
                ELSE 0.0
            END - v.u) < 1e-9) AS fits
    FROM candidate_weights AS w
    JOIN published AS v ON v.cluster_id = w.cluster_id
    GROUP BY w.cluster_id, w.profile
)
SELECT cluster_id, profile, count(*) OVER (PARTITION BY cluster_id) AS n_fitting
FROM fits
WHERE fits
