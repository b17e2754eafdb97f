-- Case-mix shift per site and period: an anytime-valid test of each dimension's category shares, over
-- lesion clusters (sql/recurring/monitor_case_mix_counts.sql: one observation per cluster, assumed independent
-- draws of the site's mix under the null). Two nulls (docs/monitoring.md, "Case-mix shift"):
--
-- * A declared reference theta0 (monitor_case_mix_reference, for the dimensions it lists): the
--   sequential multinomial test of Lindon and Malek (the sequential sample-ratio-mismatch test). x: the
--   clusters from the first period to the current one, n their total; Dirichlet prior a = $concentration
--   * theta0:
--     ln BF = lgamma(A) - lgamma(A + n) + sum_i [lgamma(a_i + x_i) - lgamma(a_i)] - sum_i x_i ln theta0_i
--   (A = $concentration), a nonnegative martingale under theta0. A cluster in a category the reference
--   gives no share makes BF infinite (p = 0).
-- * Otherwise the baseline is estimated: H0 says the clusters after the site's first $baseline_periods
--   periods come from the same (unknown) multinomial as the baseline's. Treating the baseline's shares
--   as known would let their estimation error alone grow the Bayes factor. The e-process here is the
--   universal-inference likelihood ratio (Wasserman, Ramdas and Balakrishnan 2020): a mixture of
--   alternatives over the maximised null likelihood,
--     ln E = ln DM(b; $prior) + ln DM(x; $prior) - sup_theta ln L(theta; b + x)
--   with b the baseline clusters per category, x the clusters after it to date, DM(y; a) the
--   Dirichlet-multinomial probability of a sequence with counts y under the Dirichlet(a, ..., a) prior
--   (lgamma(K a) - lgamma(K a + n) + sum_i [lgamma(a + y_i) - lgamma(a)]): the alternative, baseline and
--   later clusters of two unrelated mixes; and sup ln L = sum_i N_i ln N_i - N ln N over the pooled
--   N_i = b_i + x_i, the best single mix for both. For every theta of the null,
--   E <= the likelihood ratio of the mixture against theta, a nonnegative martingale of mean 1 under
--   theta, so Ville's inequality holds for E whatever the common mix is.
--
-- Either way p = min(1, 1 / running max over the tested looks), anytime-valid. Categories are fixed
-- before any look is tested, so that data landed later never changes an earlier look's e-value: a
-- declared reference's categories (any other a site shows has no share: BF infinite from the look it
-- shows), or the dimension's vocabulary (monitor_case_mix_vocabulary), the categories the site's baseline
-- periods show and `other`, which takes every category first shown after the baseline; K their number.
-- Input: monitor_case_mix_counts, monitor_case_mix_reference (dimension, category, share),
-- monitor_case_mix_vocabulary (dimension, category). Output: site, period, look, dimension, category,
-- count, share, baseline_share (the declared share, or the baseline clusters' share), tested (false in a
-- baseline period), log_bayes_factor (ln BF or ln E), p_value.
WITH looks AS (
    SELECT DISTINCT site, period, look FROM monitor_case_mix_counts
),
site_dimensions AS (
    SELECT DISTINCT site, dimension FROM monitor_case_mix_counts
),
declared_dimensions AS (
    SELECT DISTINCT dimension FROM monitor_case_mix_reference
),
categories AS (
    SELECT DISTINCT site, dimension, category FROM monitor_case_mix_counts
    WHERE dimension IN (SELECT dimension FROM declared_dimensions) OR look <= $baseline_periods
    UNION
    SELECT d.site, r.dimension, r.category
    FROM site_dimensions AS d
    JOIN monitor_case_mix_reference AS r ON r.dimension = d.dimension
    UNION
    SELECT d.site, v.dimension, v.category
    FROM site_dimensions AS d
    JOIN monitor_case_mix_vocabulary AS v ON v.dimension = d.dimension
    WHERE v.dimension NOT IN (SELECT dimension FROM declared_dimensions)
    UNION
    SELECT site, dimension, 'other'
    FROM site_dimensions
    WHERE dimension NOT IN (SELECT dimension FROM declared_dimensions)
),
counts AS (  -- a category first shown after the baseline counts as `other`
    SELECT m.site, m.look, m.dimension, coalesce(c.category, 'other') AS category, sum(m.count) AS count
    FROM monitor_case_mix_counts AS m
    LEFT JOIN categories AS c ON c.site = m.site AND c.dimension = m.dimension AND c.category = m.category
    GROUP BY m.site, m.look, m.dimension, coalesce(c.category, 'other')
),
grid AS (  -- every category of a site's dimension at every look of the site (absent: 0 clusters)
    SELECT c.site, c.dimension, c.category, l.look, l.period, CAST(coalesce(m.count, 0) AS DOUBLE) AS count,
           c.dimension IN (SELECT dimension FROM declared_dimensions) AS declared
    FROM categories AS c
    JOIN looks AS l ON l.site = c.site
    LEFT JOIN counts AS m
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
        b.base_count,
        b.base_total,
        b.k,
        CASE WHEN g.declared THEN coalesce(r.share, 0.0) ELSE b.base_count / NULLIF(b.base_total, 0) END
            AS baseline_share,
        coalesce(r.share, 0.0) AS theta0,
        CASE WHEN g.declared THEN 1 ELSE $baseline_periods + 1 END AS first_test_look,
        g.count / NULLIF(sum(g.count) OVER (PARTITION BY g.site, g.dimension, g.look), 0) AS share
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
            WHEN declared AND theta0 = 0 AND x > 0 THEN CAST('inf' AS DOUBLE)
            WHEN declared AND theta0 = 0 THEN 0.0
            WHEN declared THEN lgamma($concentration * theta0 + x) - lgamma($concentration * theta0) - x * ln(theta0)
            ELSE lgamma($prior + x) + lgamma($prior + base_count) - 2 * lgamma($prior)
                 - CASE WHEN base_count + x > 0 THEN (base_count + x) * ln(base_count + x) ELSE 0.0 END
        END AS term
    FROM cumulative
),
per_look AS (
    SELECT
        site,
        dimension,
        look,
        any_value(tested) AS tested,
        sum(term)
        + CASE WHEN any_value(declared)
               THEN lgamma(CAST($concentration AS DOUBLE)) - lgamma($concentration + sum(x))
               ELSE 2 * lgamma($prior * any_value(k)) - lgamma($prior * any_value(k) + sum(x))
                    - lgamma($prior * any_value(k) + any_value(base_total))
                    + CASE WHEN any_value(base_total) + sum(x) > 0
                           THEN (any_value(base_total) + sum(x)) * ln(any_value(base_total) + sum(x)) ELSE 0.0 END
          END AS log_bf
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
    t.baseline_share,
    r.tested,
    CASE WHEN r.tested THEN r.log_bf END AS log_bayes_factor,
    CASE WHEN r.tested THEN least(1.0, exp(-greatest(r.max_log_bf, 0.0))) END AS p_value
FROM terms AS t
JOIN running AS r ON r.site = t.site AND r.dimension = t.dimension AND r.look = t.look
ORDER BY t.site, t.look, t.dimension, t.category
