-- review_change_counts: how the local authority changed the proposals, per analysis (AuthEval spec
-- 3.8's intervention types): rows per change_type and override, for asset metadata and checks.
-- Input: selections.
SELECT
    analysis,
    count(*) AS n_rows,
    count(*) FILTER (WHERE change_type = 'none') AS n_none,
    count(*) FILTER (WHERE change_type = 'down_substitution') AS n_down_substitution,
    count(*) FILTER (WHERE change_type = 'up_substitution') AS n_up_substitution,
    count(*) FILTER (WHERE change_type = 'fallback') AS n_fallback,
    count(*) FILTER (WHERE change_type IS NULL) AS n_unknown,
    count(*) FILTER (WHERE override = 'patient_refusal') AS n_patient_refusal,
    count(*) FILTER (WHERE override = 'patient_burden') AS n_patient_burden,
    count(*) FILTER (WHERE override = 'empty_band_default') AS n_empty_band_default
FROM selections
GROUP BY analysis
ORDER BY analysis
