-- selections: what the local authority selected per analysis (mechanism x review regime) and image,
-- and how it changed the proposal. Input: reference_traces.
SELECT analysis, study, mechanism, regime, image_id, a_head, a_exec AS a_sel,
       intervention_type AS change_type
FROM reference_traces
ORDER BY analysis, image_id
