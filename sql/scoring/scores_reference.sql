-- scores: both actions scored under the same declared local rule (U_z), and the proposal under the
-- global benchmark rule (U_g) where the analysis recorded it. Input: reference_traces.
SELECT analysis, image_id, "Uz_head" AS u_local_head, "Uz_exec" AS u_local_sel,
       "Ug_head" AS u_global_head
FROM reference_traces
ORDER BY analysis, image_id
