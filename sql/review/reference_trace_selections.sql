-- reference_trace_selections: the published traces in the `selections` layout (a_sel = a_exec), one
-- row per distinct (mechanism, regime, image): the MedGemma readout under capacity appears in both
-- studies with identical rows, so 5 x 3,967 rows remain. Scoring these with review_scores gives the
-- rule engine's U_z of both published actions. Input: reference_traces.
SELECT DISTINCT
    mechanism || ' / ' || regime AS analysis,
    mechanism,
    regime,
    image_id,
    cluster_id,
    a_head,
    a_exec AS a_sel,
    "Uz_head" AS trace_u_local_head,
    "Uz_exec" AS trace_u_local_sel
FROM reference_traces
