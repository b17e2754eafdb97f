-- Check: the declared rules reproduce the published U_z of both actions bit for bit on every trace
-- row whose cluster profile the traces identify (AuthEval spec 3.4: 16,020 rows of the five distinct
-- traces). Compares the engine's scores of the published actions with the trace values by exact equality.
-- Input: reference_trace_selections, reference_trace_scores (scoring/scores_cohort.sql over them),
-- reference_cluster_profiles. Returns one row.
WITH identified AS (
    SELECT cluster_id FROM reference_cluster_profiles WHERE n_fitting = 1
),
compared AS (
    SELECT
        t.analysis,
        t.image_id,
        s.u_local_head = t.trace_u_local_head AND s.u_local_sel = t.trace_u_local_sel AS reproduced
    FROM reference_trace_selections AS t
    JOIN identified AS i ON i.cluster_id = t.cluster_id
    LEFT JOIN reference_trace_scores AS s ON s.analysis = t.analysis AND s.image_id = t.image_id
)
SELECT
    count(*) AS identified_rows,
    count(*) FILTER (WHERE reproduced) AS reproduced_rows,
    count(*) FILTER (WHERE reproduced IS NOT TRUE) AS violations,
    min(analysis || ': ' || image_id) FILTER (WHERE reproduced IS NOT TRUE) AS example
FROM compared
