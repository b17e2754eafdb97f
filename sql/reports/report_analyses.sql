-- The report's provenance of each analysis: what made its numbers (record level, mechanism, record
-- source and its data hash, bootstrap scheme, replicates, seed, interval levels). Input: estimates.
SELECT study, analysis,
       min(record_level) AS record_level, min(model) AS mechanism, min(source) AS source,
       min(data_sha256) AS data_sha256, count(DISTINCT data_sha256) AS data_hashes,
       min(scheme) AS scheme, min(interval_method) AS interval_method, min(reps) AS reps,
       min(seed) AS seed, min(quantile_lower) AS quantile_lower, min(quantile_upper) AS quantile_upper,
       max(n) FILTER (WHERE metric = 'J' AND unit = 'image_weighted') AS n_images,
       max(n_clusters) AS n_clusters
FROM estimates
GROUP BY study, analysis
ORDER BY study DESC, min(analysis_order), analysis
