-- The published case traces of the reference study, one row per analysis and image, labelled with
-- their analysis, study, mechanism and review regime. Input: trace_catalog(analysis, study,
-- mechanism, regime, file); parameter $files (the catalog's file paths).
SELECT
    c.analysis,
    c.study,
    c.mechanism,
    c.regime,
    t.image_id,
    t.cluster_id,
    t.policy_id,
    t.slate_size,
    t.a_head,
    t.a_exec,
    t.intervention_type,
    t."Uz_head",
    t."Uz_exec",
    t."Ug_head"
FROM read_parquet($files, filename = true, union_by_name = true) AS t
JOIN trace_catalog AS c ON c.file = t.filename
