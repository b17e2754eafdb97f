-- Case-mix shift per site and period: the sequential multinomial test of Lindon and Malek
-- (anytime-valid inference for multinomial count data; the sequential sample-ratio-mismatch test) of
-- each dimension's category shares against the site's baseline shares theta0.
-- theta0: a declared reference (monitor_case_mix_reference, for the dimensions it lists), else the
-- site's first $baseline_periods periods, smoothed by half a case per category
-- ((count + 0.5) / (total + 0.5 K) over the K categories the site shows in any period).
-- The test counts x are the cases from the first period after the baseline (from the first period when
-- a reference is declared) to the current one, n their total. With the Dirichlet prior
-- a = $concentration * theta0, the Bayes factor of the Dirichlet-multinomial against theta0 is
--   ln BF = lgamma(A) - lgamma(A + n) + sum_i [lgamma(a_i + x_i) - lgamma(a_i)] - sum_i x_i ln theta0_i
-- (A = sum a_i = $concentration), a nonnegative martingale under theta0 (Ville: P(sup BF >= 1/alpha)
-- <= alpha), so p = min(1, 1 / running max BF) over the looks is anytime-valid. A case in a category
-- the declared reference gives no share makes BF infinite (p = 0).
-- Input: monitor_case_mix_counts (sql/monitor_case_mix_counts.sql), monitor_case_mix_reference
-- (dimension, category, share). Output: site, period, look, dimension, category, count, share,
-- baseline_share, tested (false in a baseline period), log_bayes_factor, p_value.
WITH looks AS (
    SELECT DISTINCT site, period, look FROM monitor_case_mix_counts
),
site_dimensions AS (
    SELECT DISTINCT site, dimension FROM monitor_case_mix_counts
),
categories AS (
    SELECT DISTINCT site, dimension, category FROM monitor_case_mix_counts
    UNION
    SELECT d.site, r.dimension, r.category
    FROM site_dimensions AS d
    JOIN monitor_case_mix_reference AS r ON r.dimension = d.dimension
),
grid AS (  -- every category of a site's dimension at every look of the site (absent: 0 cases)
    SELECT c.site, c.dimension, c.category, l.look, l.period, coalesce(m.count, 0) AS count,
           EXISTS (SELECT 1 FROM monitor_case_mix_reference AS r WHERE r.dimension = c.dimension) AS declared
    FROM categories AS c
    JOIN looks AS l ON l.site = c.site
    LEFT JOIN monitor_case_mix_counts AS m
        ON m.site = c.site AND m.dimension = c.dimension AND m.category = c.category AND m.look = l.look
),
baseline AS (
    SELECT
        g.site,
        g.dimension,
        g.category,
        sum(CASE WHEN g.look <= $baseline_periods THEN g.count ELSE 0 END) AS base_count,
        sum(sum(CASE WHEN g.look <= $baseline_periods THEN g.count ELSE 0 END))
            OVER (PARTITION BY g.site, g.dimension) AS base_total,
        count(*) OVER (PARTITION BY g.site, g.dimension) AS k
    FROM grid AS g
    GROUP BY g.site, g.dimension, g.category
),
shares AS (
    SELECT
        g.*,
        CASE WHEN g.declared THEN coalesce(r.share, 0.0)
             ELSE (b.base_count + 0.5) / (b.base_total + 0.5 * b.k) END AS theta0,
        CASE WHEN g.declared THEN 1 ELSE $baseline_periods + 1 END AS first_test_look,
        CAST(g.count AS DOUBLE) / NULLIF(sum(g.count) OVER (PARTITION BY g.site, g.dimension, g.look), 0) AS share
    FROM grid AS g
    JOIN baseline AS b ON b.site = g.site AND b.dimension = g.dimension AND b.category = g.category
    LEFT JOIN monitor_case_mix_reference AS r ON r.dimension = g.dimension AND r.category = g.category
),
cumulative AS (
    SELECT
        *,
        look >= first_test_look AS tested,
        sum(CASE WHEN look >= first_test_look THEN count ELSE 0 END)
            OVER (PARTITION BY site, dimension, category ORDER BY look ROWS UNBOUNDED PRECEDING) AS x
    FROM shares
),
terms AS (
    SELECT
        *,
        CASE
            WHEN theta0 = 0 AND x > 0 THEN CAST('inf' AS DOUBLE)
            WHEN theta0 = 0 THEN 0.0
            ELSE lgamma($concentration * theta0 + x) - lgamma($concentration * theta0) - x * ln(theta0)
        END AS term
    FROM cumulative
),
per_look AS (
    SELECT
        site,
        dimension,
        look,
        any_value(tested) AS tested,
        lgamma(CAST($concentration AS DOUBLE)) - lgamma($concentration + sum(x)) + sum(term) AS log_bf
    FROM terms
    GROUP BY site, dimension, look
),
running AS (
    SELECT
        *,
        max(CASE WHEN tested THEN log_bf END)
            OVER (PARTITION BY site, dimension ORDER BY look ROWS UNBOUNDED PRECEDING) AS max_log_bf
    FROM per_look
)
SELECT
    t.site,
    t.period,
    t.look,
    t.dimension,
    t.category,
    CAST(t.count AS BIGINT) AS count,
    t.share,
    t.theta0 AS baseline_share,
    r.tested,
    CASE WHEN r.tested THEN r.log_bf END AS log_bayes_factor,
    CASE WHEN r.tested THEN least(1.0, exp(-greatest(r.max_log_bf, 0.0))) END AS p_value
FROM terms AS t
JOIN running AS r ON r.site = t.site AND r.dimension = t.dimension AND r.look = t.look
ORDER BY t.site, t.look, t.dimension, t.category
