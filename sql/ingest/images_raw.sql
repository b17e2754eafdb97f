-- The `images` table from the staged metadata (AuthEval spec 1.2-1.5).
-- Input: staged(row_index, image_id, path, patient_id, lesion_id, diagnosis_raw, sex, age_raw,
--        anatomic_site, source_raw, ...), excluded(row_index), diagnosis_map(alias, code,
--        risk_stratum, ideal_action_level).
-- Parameters: $profiles (the four profile names in index order), $use_source (profile from the
--        source keywords instead of the age/site hash), $default_source (source when none is given).
-- age_bin is right-closed, (0,30] '<30' ... (70,200] '70+', and the literal string 'nan' otherwise.
-- site_profile = profiles[H12(signature) mod 4], H12 = first 12 hex digits of SHA-256 as an integer.
WITH kept AS (
    SELECT s.* FROM staged AS s ANTI JOIN excluded AS e ON s.row_index = e.row_index
),
typed AS (
    SELECT
        k.*,
        m.code AS diagnosis,
        m.risk_stratum,
        m.ideal_action_level,
        CASE WHEN isfinite(TRY_CAST(trim(k.age_raw) AS DOUBLE))
             THEN TRY_CAST(trim(k.age_raw) AS DOUBLE) END AS age
    FROM kept AS k
    JOIN diagnosis_map AS m ON lower(trim(k.diagnosis_raw)) = m.alias
),
binned AS (
    SELECT
        *,
        CASE
            WHEN age > 0 AND age <= 30 THEN '<30'
            WHEN age > 30 AND age <= 50 THEN '30-50'
            WHEN age > 50 AND age <= 70 THEN '50-70'
            WHEN age > 70 AND age <= 200 THEN '70+'
            ELSE 'nan'
        END AS age_bin
    FROM typed
),
signed AS (
    SELECT
        *,
        -- age_bin is never NULL ('nan' instead), so the image-id fallback of spec 1.5 is unreachable,
        -- exactly as in the reference code; it is kept for the rule's completeness.
        CASE
            WHEN age_bin IS NULL AND anatomic_site IS NULL THEN 'image|' || image_id
            ELSE coalesce(age_bin, '__missing_age__') || '|' || coalesce(anatomic_site, '__missing_site__')
        END AS profile_signature
    FROM binned
),
profiled AS (
    SELECT
        *,
        CASE
            WHEN NOT $use_source
                THEN list_extract($profiles,
                     CAST(CAST('0x' || left(sha256(profile_signature), 12) AS UBIGINT) % 4 AS INTEGER) + 1)
            WHEN regexp_matches(lower(coalesce(source_raw, '')), 'bcn|barcelona') THEN 'BCN_like'
            WHEN regexp_matches(lower(coalesce(source_raw, '')), 'ham|ham10000|vidir|rosendahl|vienna') THEN 'HAM_like'
            WHEN regexp_matches(lower(coalesce(source_raw, '')), 'msk|memorial|sloan') THEN 'MSK_like'
            ELSE 'RURAL_like'
        END AS site_profile
    FROM signed
)
SELECT
    image_id,
    lesion_id,
    patient_id,
    age,
    sex,
    anatomic_site,
    diagnosis,
    risk_stratum,
    CAST(ideal_action_level AS INTEGER) AS ideal_action_level,
    age_bin,
    site_profile,
    CASE WHEN $use_source THEN 'SRC_' ELSE 'SYN_' END || site_profile AS site_id,
    path,
    coalesce(source_raw, $default_source) AS source,
    profile_signature,
    CASE WHEN sex IS NULL OR lower(trim(sex)) IN ('', 'nan', 'none') THEN '__missing__'
         ELSE lower(trim(sex)) END AS sex_norm,
    CASE WHEN anatomic_site IS NULL OR lower(trim(anatomic_site)) IN ('', 'nan', 'none') THEN '__missing__'
         ELSE lower(trim(anatomic_site)) END AS site_norm,
    row_index
FROM profiled
ORDER BY row_index
