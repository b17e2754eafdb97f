-- Each look of each rule decided on the running intersection of its confidence sequence: every look of
-- the hypothesis to this one that can be decided (available, at least min_clusters clusters, a sequence
-- defined) drawn at this look's adjusted level (the radius of sql/recurring/monitor_cs.sql, the same
-- rho^2, alpha_adjusted in place of alpha), and intersected. The sequence holds at every look at once,
-- so its intersection does too, and it only shrinks: a look cannot `pass` on its own sequence after an
-- earlier look's sequence lay outside the bounds. Then
--   alert        when the intersection lies wholly outside [lower, upper] (a missing bound is open):
--                exactly when the running minimum of the anytime p-values is below alpha_adjusted;
--                or when it is empty (two looks' sequences are disjoint: the metric has changed, which
--                the sequence, valid under a stationary metric, says with the same error rate);
--   pass         when it lies wholly inside;
--   insufficient otherwise, or below min_clusters (then the look's own sequence is reported), or where
--                the metric is not available (the caller words the reason).
-- Input: monitor_decisions(row_id, hypothesis, look, available, estimate, sigma, n_clusters, rho2,
-- alpha_adjusted, min_clusters, lower, upper). Output: row_id, cs_lower, cs_upper (the running
-- intersection where the look is decidable), lower_look, upper_look (the looks whose sequence gives
-- each end), status.
WITH decidable AS (
    SELECT
        *,
        available AND sigma IS NOT NULL AND NOT isnan(sigma) AND estimate IS NOT NULL
            AND n_clusters >= min_clusters AS decides,
        CAST(n_clusters AS DOUBLE) AS t
    FROM monitor_decisions
),
own AS (  -- the look's own sequence at its adjusted level
    SELECT
        row_id,
        estimate - sigma * sqrt(2.0 * (t * rho2 + 1.0) / (t * t * rho2) * ln(sqrt(t * rho2 + 1.0) / alpha_adjusted))
            AS cs_lower,
        estimate + sigma * sqrt(2.0 * (t * rho2 + 1.0) / (t * t * rho2) * ln(sqrt(t * rho2 + 1.0) / alpha_adjusted))
            AS cs_upper
    FROM decidable
),
earlier AS (  -- every decidable look to this one, drawn at this look's level
    SELECT
        d.row_id,
        e.look,
        e.estimate - e.sigma * sqrt(2.0 * (e.t * e.rho2 + 1.0) / (e.t * e.t * e.rho2)
                                    * ln(sqrt(e.t * e.rho2 + 1.0) / d.alpha_adjusted)) AS lo,
        e.estimate + e.sigma * sqrt(2.0 * (e.t * e.rho2 + 1.0) / (e.t * e.t * e.rho2)
                                    * ln(sqrt(e.t * e.rho2 + 1.0) / d.alpha_adjusted)) AS hi
    FROM decidable AS d
    JOIN decidable AS e ON e.hypothesis = d.hypothesis AND e.look <= d.look AND e.decides
    WHERE d.decides
),
running AS (
    SELECT
        row_id,
        max(lo) AS run_lower,
        min(hi) AS run_upper,
        arg_max(look, lo) AS lower_look,
        arg_min(look, hi) AS upper_look
    FROM earlier
    GROUP BY row_id
),
bands AS (
    SELECT
        d.row_id, d.available, d.decides, d.n_clusters, d.min_clusters, d.lower, d.upper,
        coalesce(r.run_lower, o.cs_lower) AS cs_lower,
        coalesce(r.run_upper, o.cs_upper) AS cs_upper,
        r.lower_look,
        r.upper_look
    FROM decidable AS d
    JOIN own AS o ON o.row_id = d.row_id
    LEFT JOIN running AS r ON r.row_id = d.row_id
)
SELECT
    row_id,
    cs_lower,
    cs_upper,
    lower_look,
    upper_look,
    CASE
        WHEN NOT available OR cs_lower IS NULL OR isnan(cs_lower) THEN 'insufficient'
        WHEN NOT decides THEN 'insufficient'
        WHEN cs_upper < lower OR cs_lower > upper THEN 'alert'
        WHEN cs_lower > cs_upper THEN 'alert'
        WHEN (lower IS NULL OR cs_lower >= lower) AND (upper IS NULL OR cs_upper <= upper) THEN 'pass'
        ELSE 'insufficient'
    END AS status
FROM bands
ORDER BY row_id
