-- review_bands: the admissible band of every (cluster, review regime) after the patient overrides
-- (AuthEval spec 3.6-3.7). A band is a bit mask over action levels: bit l set = action a<l> admissible.
--   capacity_ceiling: levels <= capacity; safety_floor: levels >= floor; mixed: floor <= level <= capacity.
--   1. aversion = $refusal_level and $refusal_removes in the band -> removed ('patient_refusal');
--   2. burden = $burden_level and $burden_removes in the band -> removed when the band also holds the
--      risk bin's `if_band_has` action ('patient_burden');
--   3. an empty band becomes the risk bin's declared default ('empty_band_default'; ignores capacity).
-- `override` is the last override that changed the band. A band that needs an unknown context value
-- (profile, or the risk bin where a rule reads it) is NULL, never guessed (check_selections_band).
-- Input: contexts, regimes(regime), rule_risk_levels. Parameters: $max_level, $refusal_level,
-- $refusal_removes, $burden_level, $burden_removes.
WITH regime_band AS (
    SELECT
        c.cluster_id,
        g.regime,
        c.burden,
        c.aversion,
        r.burden_keep_level,
        r.empty_default_level,
        CASE
            WHEN g.regime = 'capacity_ceiling' THEN (1 << (c.capacity + 1)) - 1
            WHEN g.regime = 'safety_floor' THEN (1 << ($max_level + 1)) - (1 << c.floor)
            WHEN g.regime = 'mixed' AND c.floor > c.capacity THEN 0
            WHEN g.regime = 'mixed' THEN (1 << (c.capacity + 1)) - (1 << c.floor)
        END AS regime_mask
    FROM contexts AS c
    CROSS JOIN regimes AS g
    LEFT JOIN rule_risk_levels AS r ON r.risk_level = c.risk_bin
),
refused AS (
    SELECT
        *,
        aversion = $refusal_level AND (regime_mask >> $refusal_removes) & 1 = 1 AS refusal_applied
    FROM regime_band
),
after_refusal AS (
    SELECT
        *,
        CASE WHEN refusal_applied THEN regime_mask - (1 << $refusal_removes) ELSE regime_mask END AS refusal_mask
    FROM refused
),
burdened AS (
    SELECT
        *,
        burden = $burden_level AND (refusal_mask >> $burden_removes) & 1 = 1 AS burden_triggered
    FROM after_refusal
),
after_burden AS (
    SELECT
        *,
        burden_triggered AND (refusal_mask >> burden_keep_level) & 1 = 1 AS burden_applied,
        CASE
            WHEN NOT burden_triggered THEN refusal_mask
            WHEN burden_keep_level IS NULL THEN NULL
            WHEN (refusal_mask >> burden_keep_level) & 1 = 1 THEN refusal_mask - (1 << $burden_removes)
            ELSE refusal_mask
        END AS burden_mask
    FROM burdened
)
SELECT
    cluster_id,
    regime,
    CASE WHEN burden_mask = 0 THEN 1 << empty_default_level ELSE burden_mask END AS band_mask,
    CASE
        WHEN burden_mask = 0 THEN 'empty_band_default'
        WHEN burden_applied THEN 'patient_burden'
        WHEN refusal_applied THEN 'patient_refusal'
    END AS override
FROM after_burden
