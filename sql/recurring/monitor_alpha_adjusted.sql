-- The level each hypothesis (a site x model version x rule of a protocol) is decided at, per calendar
-- period, after the multiplicity correction over a family of m hypotheses fixed for every period:
--   m = greatest($family_size, the hypotheses tested at any period of the input)
-- ($family_size: the protocol's declared family, NULL when it declares none). A hypothesis of the family
-- with no data yet by a period counts with p = 1: it is never rejected and only makes m larger. So the
-- family does not grow when a site or model version joins, and a hypothesis tested early is not tested at
-- a looser level than later (a family counted per period would be: with 10 hypotheses entering one per
-- period its family-wise error was 0.138 +- 0.005 at alpha 0.05; benchmarks/monitoring_family.py).
-- A hypothesis's p-value at period P is the running minimum of its anytime-valid p-values
-- (sql/recurring/monitor_cs_pvalues.sql) over its looks up to P (NULL, not yet decidable: 1). Per period, with
-- the hypotheses with data ordered by p / alpha (alpha: the hypothesis's own level, a site may override it):
--   holm:       step i (1-based) has level alpha_i / (m - i + 1); the steps up to the first one whose
--               p exceeds its level keep their level, that step and every later one get
--               alpha_i / (m - stop + 1) (none of them can be rejected: Holm's step-down);
--   bonferroni: alpha_i / m;      none: alpha_i.
-- With one alpha this is Holm's procedure exactly over the m hypotheses (those without data last, at
-- p = 1). With m fixed and p-values that only fall, what is rejected at a period stays rejected at every
-- later one, and every rejection is one of Holm's on the final running minima (valid p-values, anytime):
-- the family-wise error over every period is at most alpha (with several alphas, the largest).
-- Holm's adjusted p-values of contrasts are sql/estimates/multiplicity.sql; here the levels are needed, per
-- hypothesis, to draw each confidence sequence at the level it is decided at.
-- Input: monitor_hypothesis_looks(hypothesis, look, period, p_value, alpha, tested); rows with tested
-- false are in no family. Parameters $method, $family_size. Output: hypothesis, period, p_running,
-- family_size (m), alpha_adjusted (one row per tested hypothesis and period at or after its first look).
WITH periods AS (
    SELECT DISTINCT period FROM monitor_hypothesis_looks
),
family AS (
    SELECT greatest(coalesce(CAST($family_size AS BIGINT), 0), count(DISTINCT hypothesis)) AS m
    FROM monitor_hypothesis_looks
    WHERE tested
),
states AS (
    SELECT
        p.period AS family,
        h.hypothesis,
        min(coalesce(h.p_value, 1.0)) AS p_running,
        any_value(h.alpha) AS alpha
    FROM periods AS p
    JOIN monitor_hypothesis_looks AS h ON h.period <= p.period
    WHERE h.tested
    GROUP BY p.period, h.hypothesis
),
ranked AS (
    SELECT
        s.*,
        row_number() OVER (PARTITION BY s.family ORDER BY s.p_running / s.alpha, s.hypothesis) AS i,
        f.m
    FROM states AS s
    CROSS JOIN family AS f
),
steps AS (
    SELECT *, alpha / CAST(m - i + 1 AS DOUBLE) AS level FROM ranked
),
stops AS (
    SELECT family, min(CASE WHEN p_running > level THEN i END) AS stop
    FROM steps
    GROUP BY family
)
SELECT
    s.hypothesis,
    s.family AS period,
    s.p_running,
    CAST(s.m AS BIGINT) AS family_size,
    CASE $method
        WHEN 'none' THEN s.alpha
        WHEN 'bonferroni' THEN s.alpha / CAST(s.m AS DOUBLE)
        ELSE CASE WHEN t.stop IS NULL OR s.i < t.stop THEN s.level
                  ELSE s.alpha / CAST(s.m - t.stop + 1 AS DOUBLE) END
    END AS alpha_adjusted
FROM steps AS s
JOIN stops AS t ON t.family = s.family
ORDER BY s.hypothesis, s.family
