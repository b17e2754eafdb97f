-- contexts: the private, cluster-shared context of the simulated review, one row per cluster
-- (AuthEval spec 3.2-3.5; never copied into an exported record).
--   profile   the mode of the members' image profiles, ties -> the smallest name;
--   s_gate    the arithmetic mean of the members' gate-proxy scores (fsum: independent of row order);
--   risk_bin  the stratum whose index counts the thresholds strictly below s_gate;
--   sens, burden, aversion   levels[H12("{seed}|{namespace}|{cluster_id}") mod len(levels)];
--   capacity, floor          action levels: capacity of the profile; clip(base(bin) + shift(policy));
--   w_under, w_over          the local utility's weights, multiplied left to right as the study did:
--                            w_u = base * sens; w_o = ((base * sens) * burden) * aversion.
-- A cluster enters when one of its images has a gate-proxy score; s_gate (and so risk_bin and floor)
-- is NULL when any member lacks one, profile when any member lacks one (check_contexts_complete).
-- Input: clusters(image_id, cluster_id), image_profiles(image_id, profile), s_gate(image_id, s_gate),
--        rule_profiles, rule_factor_levels, rule_risk_levels (autheval.review.local_review.rule_tables).
-- Parameters: $context_seed (text), $sens_namespace, $burden_namespace, $aversion_namespace,
--        $n_sens, $n_burden, $n_aversion, $threshold_1..3, $max_level, $rule_version, $rule_sha256.
WITH scored_clusters AS (
    SELECT DISTINCT c.cluster_id
    FROM clusters AS c
    JOIN s_gate AS g ON g.image_id = c.image_id
),
members AS (
    SELECT c.cluster_id, c.image_id, p.profile, g.s_gate
    FROM clusters AS c
    JOIN scored_clusters AS k ON k.cluster_id = c.cluster_id
    LEFT JOIN image_profiles AS p ON p.image_id = c.image_id
    LEFT JOIN s_gate AS g ON g.image_id = c.image_id
),
profile_counts AS (
    SELECT cluster_id, profile, count(*) AS n
    FROM members
    WHERE profile IS NOT NULL
    GROUP BY cluster_id, profile
),
modal AS (
    SELECT cluster_id, profile
    FROM (
        SELECT cluster_id, profile,
               row_number() OVER (PARTITION BY cluster_id ORDER BY n DESC, profile) AS rank_in_cluster
        FROM profile_counts
    ) AS ranked
    WHERE rank_in_cluster = 1
),
shared AS (
    SELECT
        cluster_id,
        count(*) AS n_images,
        CASE WHEN count(s_gate) = count(*) THEN fsum(s_gate) / count(*) END AS s_gate,
        count(profile) = count(*) AS all_profiled
    FROM members
    GROUP BY cluster_id
),
hashed AS (
    SELECT
        s.*,
        CAST(CAST('0x' || left(sha256($context_seed || '|' || $sens_namespace || '|' || s.cluster_id), 12)
             AS UBIGINT) % $n_sens AS INTEGER) AS sens_index,
        CAST(CAST('0x' || left(sha256($context_seed || '|' || $burden_namespace || '|' || s.cluster_id), 12)
             AS UBIGINT) % $n_burden AS INTEGER) AS burden_index,
        CAST(CAST('0x' || left(sha256($context_seed || '|' || $aversion_namespace || '|' || s.cluster_id), 12)
             AS UBIGINT) % $n_aversion AS INTEGER) AS aversion_index,
        CASE
            WHEN s.s_gate > $threshold_3 THEN 3
            WHEN s.s_gate > $threshold_2 THEN 2
            WHEN s.s_gate > $threshold_1 THEN 1
            WHEN s.s_gate IS NOT NULL THEN 0
        END AS bin_level
    FROM shared AS s
)
SELECT
    h.cluster_id,
    CASE WHEN h.all_profiled THEN m.profile END AS profile,
    h.s_gate,
    r.risk_level AS risk_bin,
    fs.level AS sens,
    fb.level AS burden,
    fa.level AS aversion,
    CASE WHEN h.all_profiled THEN p.capacity END AS capacity,
    CASE WHEN h.all_profiled THEN p.floor_policy END AS floor_policy,
    CASE WHEN h.all_profiled AND r.floor_base IS NOT NULL
         THEN least(greatest(r.floor_base + p.floor_shift, 0), $max_level) END AS floor,
    CASE WHEN h.all_profiled THEN p.w_under * fs.w_under END AS w_under,
    CASE WHEN h.all_profiled THEN ((p.w_over * fs.w_over) * fb.w_over) * fa.w_over END AS w_over,
    h.n_images,
    $rule_version AS rule_version,
    $rule_sha256 AS rule_sha256
FROM hashed AS h
LEFT JOIN modal AS m ON m.cluster_id = h.cluster_id
LEFT JOIN rule_profiles AS p ON p.profile = m.profile
LEFT JOIN rule_risk_levels AS r ON r.level = h.bin_level
JOIN rule_factor_levels AS fs ON fs.factor = 'sens' AND fs.level_index = h.sens_index
JOIN rule_factor_levels AS fb ON fb.factor = 'burden' AND fb.level_index = h.burden_index
JOIN rule_factor_levels AS fa ON fa.factor = 'aversion' AND fa.level_index = h.aversion_index
