-- review_selections: the action the local authority selects for every proposal under every review
-- regime (AuthEval spec 3.8): the first element of the ranked slate inside the cluster's band.
-- change_type: 'none' (the head), 'down_substitution' / 'up_substitution' (a lower / higher level),
-- 'fallback' (no slate element admissible: the highest-level band action). a_sel and change_type are
-- NULL when the band is unknown (no context, missing profile or bin: check_selections_band).
-- analysis = mechanism || ' / ' || regime. band_mask: bit l set = a<l> admissible.
-- Input: proposals(mechanism, image_id, slate, a_head), clusters(image_id, cluster_id), regimes,
-- review_bands. Parameters: $rule_version, $rule_sha256.
WITH slates AS (
    SELECT
        p.mechanism,
        p.image_id,
        c.cluster_id,
        p.a_head,
        CAST(substr(p.a_head, 2) AS INTEGER) AS head_level,
        CAST(substr(p.slate[1], 2) AS INTEGER) AS s1,
        CAST(substr(p.slate[2], 2) AS INTEGER) AS s2,
        CAST(substr(p.slate[3], 2) AS INTEGER) AS s3,
        CAST(substr(p.slate[4], 2) AS INTEGER) AS s4
    FROM proposals AS p
    LEFT JOIN clusters AS c ON c.image_id = p.image_id
),
chosen AS (
    SELECT
        s.mechanism,
        g.regime,
        s.image_id,
        s.cluster_id,
        s.a_head,
        s.head_level,
        b.band_mask,
        b.override,
        CASE
            WHEN b.band_mask IS NULL OR b.band_mask = 0 THEN NULL
            WHEN (b.band_mask >> s.s1) & 1 = 1 THEN s.s1
            WHEN (b.band_mask >> s.s2) & 1 = 1 THEN s.s2
            WHEN (b.band_mask >> s.s3) & 1 = 1 THEN s.s3
            WHEN (b.band_mask >> s.s4) & 1 = 1 THEN s.s4
        END AS slate_level,
        CASE
            WHEN b.band_mask >= 8 THEN 3
            WHEN b.band_mask >= 4 THEN 2
            WHEN b.band_mask >= 2 THEN 1
            WHEN b.band_mask = 1 THEN 0
        END AS top_level
    FROM slates AS s
    CROSS JOIN regimes AS g
    LEFT JOIN review_bands AS b ON b.cluster_id = s.cluster_id AND b.regime = g.regime
)
SELECT
    mechanism || ' / ' || regime AS analysis,
    mechanism,
    regime,
    image_id,
    cluster_id,
    a_head,
    'a' || CAST(coalesce(slate_level, top_level) AS VARCHAR) AS a_sel,
    CASE
        WHEN band_mask IS NULL OR band_mask = 0 THEN NULL
        WHEN slate_level IS NULL THEN 'fallback'
        WHEN slate_level = head_level THEN 'none'
        WHEN slate_level < head_level THEN 'down_substitution'
        ELSE 'up_substitution'
    END AS change_type,
    override,
    band_mask,
    $rule_version AS rule_version,
    $rule_sha256 AS rule_sha256
FROM chosen
