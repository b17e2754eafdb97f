-- reference_implied_contexts: for each reference test cluster, the first (profile, risk bin) -- the
-- profile among those its utilities fit, the bin among the four -- under which the rule engine
-- reproduces every published control selection (both control mechanisms, capacity ceiling) of the
-- cluster. Shows that a context consistent with the rules exists for every cluster (the gate-proxy
-- scores are not shipped), and gives the contexts that reproduce spec 3.8's intervention counts.
-- Input: variant_selections(profile, bin_level, mechanism, image_id, cluster_id, a_sel) (the engine
-- run once per uniform profile and bin), reference_traces, reference_cluster_profiles.
WITH matched AS (
    SELECT
        v.cluster_id,
        v.profile,
        v.bin_level,
        bool_and(v.a_sel IS NOT NULL AND v.a_sel = t.a_exec) AS all_reproduced
    FROM variant_selections AS v
    JOIN reference_traces AS t
      ON t.study = 'mechanisms' AND t.mechanism = v.mechanism AND t.regime = 'capacity_ceiling'
     AND t.image_id = v.image_id
    JOIN reference_cluster_profiles AS f ON f.cluster_id = v.cluster_id AND f.profile = v.profile
    GROUP BY v.cluster_id, v.profile, v.bin_level
)
SELECT cluster_id, profile, bin_level
FROM (
    SELECT cluster_id, profile, bin_level,
           row_number() OVER (PARTITION BY cluster_id ORDER BY profile, bin_level) AS rank_in_cluster
    FROM matched
    WHERE all_reproduced
) AS ranked
WHERE rank_in_cluster = 1
