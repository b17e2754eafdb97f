-- scored_selections: every selection with both actions scored under the same declared local rule
-- U_z, and the proposal under the global (benchmark) rule U_g (AuthEval spec 4); the `scores` and
-- `records` tables are its projections (scoring/scores_cohort.sql, review/review_records.sql).
-- With g = level(action) - level(risk stratum): g < 0: ((-w_u) * s_y) * (-g); g > 0: (-w_o) * g;
-- g = 0: 0.0, multiplied in exactly this order so the published traces are reproduced bit for bit. w_u, w_o come from the cluster's context; U_g uses
-- the fixed global_w_under, global_w_over. Each image's utility of every action is computed once
-- (image_utilities), then every selection row picks its two actions' values. A score is NULL where
-- the image's risk stratum, its context or the selection is unknown.
-- Input: selections(analysis, mechanism, regime, image_id, cluster_id, a_head, a_sel), clusters,
-- contexts, images(image_id, risk_stratum), rule_risk_levels, rule_constants (one row: rule_version,
-- rule_sha256, global_w_under, global_w_over). No parameters, so a view over it stays lazy.
WITH graded AS (
    SELECT
        i.image_id,
        c.w_under,
        c.w_over,
        r.severity,
        a.level - r.level AS gap,
        a.level AS action_level,
        k0.global_w_under,
        k0.global_w_over
    FROM images AS i
    CROSS JOIN rule_constants AS k0
    JOIN rule_risk_levels AS r ON r.risk_level = i.risk_stratum
    LEFT JOIN clusters AS k ON k.image_id = i.image_id
    LEFT JOIN contexts AS c ON c.cluster_id = k.cluster_id
    CROSS JOIN (SELECT level FROM rule_risk_levels) AS a
),
action_utilities AS (
    SELECT
        image_id,
        action_level,
        CASE
            WHEN gap < 0 THEN ((-w_under) * severity) * CAST(-gap AS DOUBLE)
            WHEN gap > 0 THEN (-w_over) * CAST(gap AS DOUBLE)
            WHEN w_under IS NOT NULL THEN 0.0
        END AS u_local,
        CASE
            WHEN gap < 0 THEN ((-global_w_under) * severity) * CAST(-gap AS DOUBLE)
            WHEN gap > 0 THEN (-global_w_over) * CAST(gap AS DOUBLE)
            ELSE 0.0
        END AS u_global
    FROM graded
),
image_utilities AS (
    SELECT
        image_id,
        max(u_local) FILTER (WHERE action_level = 0) AS u_local_0,
        max(u_local) FILTER (WHERE action_level = 1) AS u_local_1,
        max(u_local) FILTER (WHERE action_level = 2) AS u_local_2,
        max(u_local) FILTER (WHERE action_level = 3) AS u_local_3,
        max(u_global) FILTER (WHERE action_level = 0) AS u_global_0,
        max(u_global) FILTER (WHERE action_level = 1) AS u_global_1,
        max(u_global) FILTER (WHERE action_level = 2) AS u_global_2,
        max(u_global) FILTER (WHERE action_level = 3) AS u_global_3
    FROM action_utilities
    GROUP BY image_id
)
SELECT
    s.analysis,
    s.mechanism,
    s.regime,
    s.image_id,
    s.cluster_id,
    s.a_head,
    s.a_sel,
    CASE s.a_head WHEN 'a0' THEN u.u_local_0 WHEN 'a1' THEN u.u_local_1 WHEN 'a2' THEN u.u_local_2
                  WHEN 'a3' THEN u.u_local_3 END AS u_local_head,
    CASE s.a_sel WHEN 'a0' THEN u.u_local_0 WHEN 'a1' THEN u.u_local_1 WHEN 'a2' THEN u.u_local_2
                 WHEN 'a3' THEN u.u_local_3 END AS u_local_sel,
    CASE s.a_head WHEN 'a0' THEN u.u_global_0 WHEN 'a1' THEN u.u_global_1 WHEN 'a2' THEN u.u_global_2
                  WHEN 'a3' THEN u.u_global_3 END AS u_global_head,
    k.rule_version,
    k.rule_sha256
FROM selections AS s
CROSS JOIN rule_constants AS k
LEFT JOIN image_utilities AS u ON u.image_id = s.image_id
