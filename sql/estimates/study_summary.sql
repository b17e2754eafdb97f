-- The study's headline table: per analysis, p and delta (image-weighted) and the authority gap with
-- its interval in both units, and the provenance every result row names. Input: estimates.
SELECT
    study,
    analysis,
    any_value(mechanism) AS mechanism,
    any_value(regime) AS regime,
    any_value(n) FILTER (WHERE metric = 'J' AND unit = 'image_weighted') AS n_images,
    any_value(n_clusters) AS n_clusters,
    any_value(estimate) FILTER (WHERE metric = 'intervention_rate' AND unit = 'image_weighted')
        AS intervention_rate,
    any_value(estimate) FILTER (WHERE metric = 'delta' AND unit = 'image_weighted') AS delta,
    any_value(estimate) FILTER (WHERE metric = 'Delta_authority' AND unit = 'image_weighted')
        AS "Delta_authority_image",
    any_value(ci_lower) FILTER (WHERE metric = 'Delta_authority' AND unit = 'image_weighted')
        AS "Delta_authority_image_ci_lower",
    any_value(ci_upper) FILTER (WHERE metric = 'Delta_authority' AND unit = 'image_weighted')
        AS "Delta_authority_image_ci_upper",
    any_value(estimate) FILTER (WHERE metric = 'Delta_authority' AND unit = 'cluster_equal')
        AS "Delta_authority_cluster",
    any_value(ci_lower) FILTER (WHERE metric = 'Delta_authority' AND unit = 'cluster_equal')
        AS "Delta_authority_cluster_ci_lower",
    any_value(ci_upper) FILTER (WHERE metric = 'Delta_authority' AND unit = 'cluster_equal')
        AS "Delta_authority_cluster_ci_upper",
    any_value(data_sha256) AS data_sha256,
    any_value(rule_version) AS rule_version,
    any_value(rule_sha256) AS rule_sha256,
    any_value(scheme) AS scheme,
    any_value(seed) AS seed,
    any_value(reps) AS reps,
    any_value(engine) AS engine,
    any_value(software_version) AS software_version
FROM estimates
GROUP BY study, analysis
ORDER BY study DESC, min(analysis_order)
