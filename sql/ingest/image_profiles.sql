-- image_profiles: the workflow profile of every image (AuthEval spec 1.4-1.5, 3.2), from the
-- profile-hash normalisation of its metadata: signature = age_bin|site, profile =
-- $profiles[H12(signature) mod $n_profiles] (H12 = first 12 hex digits of SHA-256, no seed).
-- age_bin is right-closed ((0,30] '<30', (30,50], (50,70], (70,200] '70+'), else the string 'nan';
-- the site is the raw string, NULL -> '__missing_site__'. When both are missing the declared rule
-- $missing_rule decides (spec 9.1): 'missing_tokens' -> '__missing_age__|__missing_site__',
-- 'nan_age_bin' -> 'nan|__missing_site__', 'image_id' -> 'image|' || image_id.
-- Input: images(image_id, age, anatomic_site). Parameters: $profiles (names in index order),
-- $n_profiles, $missing_rule.
WITH binned AS (
    SELECT
        image_id,
        anatomic_site,
        CASE
            WHEN age > 0 AND age <= 30 THEN '<30'
            WHEN age > 30 AND age <= 50 THEN '30-50'
            WHEN age > 50 AND age <= 70 THEN '50-70'
            WHEN age > 70 AND age <= 200 THEN '70+'
        END AS age_bin
    FROM images
),
signed AS (
    SELECT
        image_id,
        CASE
            WHEN age_bin IS NULL AND anatomic_site IS NULL THEN
                CASE $missing_rule
                    WHEN 'missing_tokens' THEN '__missing_age__|__missing_site__'
                    WHEN 'nan_age_bin' THEN 'nan|__missing_site__'
                    WHEN 'image_id' THEN 'image|' || image_id
                END
            ELSE coalesce(age_bin, 'nan') || '|' || coalesce(anatomic_site, '__missing_site__')
        END AS profile_signature
    FROM binned
),
signatures AS (  -- hash each distinct signature once: a few dozen unless the image_id rule applies
    SELECT
        profile_signature,
        list_extract($profiles,
            CAST(CAST('0x' || left(sha256(profile_signature), 12) AS UBIGINT) % $n_profiles AS INTEGER) + 1
        ) AS profile
    FROM (SELECT DISTINCT profile_signature FROM signed) AS distinct_signatures
)
SELECT s.image_id, s.profile_signature, g.profile
FROM signed AS s
JOIN signatures AS g ON g.profile_signature = s.profile_signature
