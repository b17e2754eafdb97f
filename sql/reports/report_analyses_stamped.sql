-- The report's provenance of each analysis where the estimates carry every provenance column: record
-- level, mechanism, record source and data hash, rules (version, SHA-256), bootstrap scheme,
-- replicates, seed, interval levels, engine and software version. Input: estimates.
SELECT study, analysis,
       min(record_level) AS record_level, min(mechanism) AS mechanism, min(source) AS source,
       min(data_sha256) AS data_sha256, count(DISTINCT data_sha256) AS data_hashes,
       min(rule_version) AS rule_version, min(rule_sha256) AS rule_sha256,
       min(scheme) AS scheme, min(interval_method) AS interval_method, min(reps) AS reps,
       min(seed) AS seed, min(quantile_lower) AS quantile_lower, min(quantile_upper) AS quantile_upper,
       min(engine) AS engine, min(software_version) AS software_version,
       max(n) FILTER (WHERE metric = 'J' AND unit = 'image_weighted') AS n_images,
       max(n_clusters) AS n_clusters
FROM estimates
GROUP BY study, analysis
ORDER BY study DESC, min(analysis_order), analysis
