-- review_scores: both actions scored under the same declared local rule U_z, and the proposal under
-- the global (benchmark) rule U_g (AuthEval spec 4). With g = level(action) - level(risk stratum):
-- g < 0: ((-w_u) * s_y) * (-g); g > 0: (-w_o) * g; g = 0: 0.0, multiplied in exactly this order so
-- the published traces are reproduced bit for bit. w_u, w_o come from the cluster's context; U_g uses
-- the fixed $global_w_under, $global_w_over. A score is NULL where the image's risk stratum, the
-- context or the selection is unknown.
-- Input: selections(analysis, mechanism, regime, image_id, cluster_id, a_head, a_sel), contexts,
-- images(image_id, risk_stratum), rule_risk_levels. Parameters: $global_w_under, $global_w_over,
-- $rule_version, $rule_sha256.
WITH graded AS (
    SELECT
        s.analysis,
        s.mechanism,
        s.regime,
        s.image_id,
        s.cluster_id,
        s.a_head,
        s.a_sel,
        c.w_under,
        c.w_over,
        r.severity,
        CAST(substr(s.a_head, 2) AS INTEGER) - r.level AS gap_head,
        CAST(substr(s.a_sel, 2) AS INTEGER) - r.level AS gap_sel
    FROM selections AS s
    LEFT JOIN contexts AS c ON c.cluster_id = s.cluster_id
    LEFT JOIN images AS i ON i.image_id = s.image_id
    LEFT JOIN rule_risk_levels AS r ON r.risk_level = i.risk_stratum
)
SELECT
    analysis,
    mechanism,
    regime,
    image_id,
    cluster_id,
    a_head,
    a_sel,
    CASE
        WHEN gap_head < 0 THEN ((-w_under) * severity) * CAST(-gap_head AS DOUBLE)
        WHEN gap_head > 0 THEN (-w_over) * CAST(gap_head AS DOUBLE)
        WHEN gap_head = 0 AND w_under IS NOT NULL THEN 0.0
    END AS u_local_head,
    CASE
        WHEN gap_sel < 0 THEN ((-w_under) * severity) * CAST(-gap_sel AS DOUBLE)
        WHEN gap_sel > 0 THEN (-w_over) * CAST(gap_sel AS DOUBLE)
        WHEN gap_sel = 0 AND w_under IS NOT NULL THEN 0.0
    END AS u_local_sel,
    CASE
        WHEN gap_head < 0 THEN ((-CAST($global_w_under AS DOUBLE)) * severity) * CAST(-gap_head AS DOUBLE)
        WHEN gap_head > 0 THEN (-CAST($global_w_over AS DOUBLE)) * CAST(gap_head AS DOUBLE)
        WHEN gap_head = 0 THEN 0.0
    END AS u_global_head,
    $rule_version AS rule_version,
    $rule_sha256 AS rule_sha256
FROM graded
