-- review_selections: the action the local authority selects for every proposal under every review
-- regime (AuthEval spec 3.8): the first element of the ranked slate inside the cluster's band.
-- change_type: 'none' (the head), 'down_substitution' / 'up_substitution' (a lower / higher level),
-- 'fallback' (no slate element admissible: the highest-level band action). a_sel and change_type are
-- NULL when the band is unknown (no context, missing profile or bin: check_selections_band).
-- analysis = mechanism || ' / ' || regime. band_mask: bit l set = a<l> admissible.
-- Input: proposals(mechanism, image_id, slate, a_head), clusters(image_id, cluster_id), regimes,
-- review_bands. Parameters: $rule_version, $rule_sha256.
-- Rows in (analysis, image_id) order, as the reference's selections: the joins would give an order that
-- changes from run to run (the threads), and the same inputs must give the same bytes.
WITH band_by_cluster AS (
    SELECT
        cluster_id,
        max(band_mask) FILTER (WHERE regime = 'capacity_ceiling') AS capacity_mask,
        max(override) FILTER (WHERE regime = 'capacity_ceiling') AS capacity_override,
        max(band_mask) FILTER (WHERE regime = 'safety_floor') AS safety_mask,
        max(override) FILTER (WHERE regime = 'safety_floor') AS safety_override,
        max(band_mask) FILTER (WHERE regime = 'mixed') AS mixed_mask,
        max(override) FILTER (WHERE regime = 'mixed') AS mixed_override
    FROM review_bands
    GROUP BY cluster_id
),
slates AS (  -- one row per proposal, joined to its cluster's bands before the regimes multiply it
    SELECT
        p.mechanism,
        p.image_id,
        c.cluster_id,
        p.a_head,
        CASE p.a_head WHEN 'a0' THEN 0 WHEN 'a1' THEN 1 WHEN 'a2' THEN 2 WHEN 'a3' THEN 3 END AS head_level,
        CASE p.slate[1] WHEN 'a0' THEN 0 WHEN 'a1' THEN 1 WHEN 'a2' THEN 2 WHEN 'a3' THEN 3 END AS s1,
        CASE p.slate[2] WHEN 'a0' THEN 0 WHEN 'a1' THEN 1 WHEN 'a2' THEN 2 WHEN 'a3' THEN 3 END AS s2,
        CASE p.slate[3] WHEN 'a0' THEN 0 WHEN 'a1' THEN 1 WHEN 'a2' THEN 2 WHEN 'a3' THEN 3 END AS s3,
        CASE p.slate[4] WHEN 'a0' THEN 0 WHEN 'a1' THEN 1 WHEN 'a2' THEN 2 WHEN 'a3' THEN 3 END AS s4,
        b.capacity_mask, b.capacity_override, b.safety_mask, b.safety_override, b.mixed_mask, b.mixed_override
    FROM proposals AS p
    LEFT JOIN clusters AS c ON c.image_id = p.image_id
    LEFT JOIN band_by_cluster AS b ON b.cluster_id = c.cluster_id
),
banded AS (
    SELECT
        s.*,
        g.regime,
        s.mechanism || ' / ' || g.regime AS analysis,
        CASE g.regime
            WHEN 'capacity_ceiling' THEN s.capacity_mask WHEN 'safety_floor' THEN s.safety_mask
            WHEN 'mixed' THEN s.mixed_mask
        END AS band_mask,
        CASE g.regime
            WHEN 'capacity_ceiling' THEN s.capacity_override WHEN 'safety_floor' THEN s.safety_override
            WHEN 'mixed' THEN s.mixed_override
        END AS override
    FROM slates AS s
    CROSS JOIN regimes AS g
),
chosen AS (  -- banded, with the first slate level inside the band and the band's top level
    SELECT
        *,
        CASE
            WHEN band_mask IS NULL OR band_mask = 0 THEN NULL
            WHEN (band_mask >> s1) & 1 = 1 THEN s1
            WHEN (band_mask >> s2) & 1 = 1 THEN s2
            WHEN (band_mask >> s3) & 1 = 1 THEN s3
            WHEN (band_mask >> s4) & 1 = 1 THEN s4
        END AS slate_level,
        CASE
            WHEN band_mask >= 8 THEN 3
            WHEN band_mask >= 4 THEN 2
            WHEN band_mask >= 2 THEN 1
            WHEN band_mask = 1 THEN 0
        END AS top_level
    FROM banded
)
SELECT
    analysis,
    mechanism,
    regime,
    image_id,
    cluster_id,
    a_head,
    CASE coalesce(slate_level, top_level) WHEN 0 THEN 'a0' WHEN 1 THEN 'a1' WHEN 2 THEN 'a2' WHEN 3 THEN 'a3' END
        AS a_sel,
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
ORDER BY analysis, image_id
