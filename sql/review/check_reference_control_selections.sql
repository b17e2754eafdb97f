-- Check: for the two control mechanisms under the capacity ceiling, the rule engine selects the
-- published a_exec on every checkable row (AuthEval spec 5.5: 3,170 rows): rows of clusters whose
-- profile the traces identify and whose band the rules can form without the (unshipped) gate-proxy
-- bin, i.e. the engine's a_sel is known (with the study's rules: follow-up burden 'low').
-- Input: selections (engine), reference_traces, reference_cluster_profiles. Returns one row.
WITH identified AS (
    SELECT cluster_id FROM reference_cluster_profiles WHERE n_fitting = 1
),
compared AS (
    SELECT s.mechanism, s.image_id, s.a_sel, t.a_exec, s.a_sel = t.a_exec AS reproduced
    FROM selections AS s
    JOIN identified AS i ON i.cluster_id = s.cluster_id
    JOIN reference_traces AS t
      ON t.study = 'mechanisms' AND t.mechanism = s.mechanism AND t.regime = s.regime AND t.image_id = s.image_id
    WHERE s.regime = 'capacity_ceiling' AND s.mechanism IN ('LLaVA-Med head', 'CLIP probe')
)
SELECT
    count(*) FILTER (WHERE a_sel IS NOT NULL) AS checkable_rows,
    count(*) FILTER (WHERE reproduced) AS reproduced_rows,
    count(*) FILTER (WHERE a_sel IS NOT NULL AND NOT reproduced) AS violations,
    count(*) AS identified_rows,
    min(mechanism || ': ' || image_id) FILTER (WHERE a_sel IS NOT NULL AND NOT reproduced) AS example
FROM compared
