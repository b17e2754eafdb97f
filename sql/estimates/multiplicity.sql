-- Multiplicity adjustments over declared families of tests: Holm's step-down adjusted p-values (they
-- control the family-wise error rate) and Benjamini-Hochberg q-values (the false discovery rate).
-- With the p-values of a family of m sorted ascending, p_(1) <= ... <= p_(m):
--   Holm:  p_holm_(i) = max over j <= i of min(1, (m - j + 1) p_(j))
--   BH:    q_bh_(i)   = min over j >= i of min(1, m p_(j) / j)
-- (ties share one value whatever their order). A row with no p-value is in no family.
-- Input: tested(row_id, family, p_value). Output: row_id, family_size, p_holm, q_bh, one row per
-- tested row. Portable SQL (windows with frames; no FILTER).
WITH ranked AS (
    SELECT
        row_id,
        family,
        p_value,
        row_number() OVER (PARTITION BY family ORDER BY p_value, row_id) AS i,
        count(*) OVER (PARTITION BY family) AS m
    FROM tested
    WHERE p_value IS NOT NULL
),
steps AS (
    SELECT
        *,
        least(CAST(1 AS DOUBLE), CAST(m - i + 1 AS DOUBLE) * p_value) AS holm_step,
        least(CAST(1 AS DOUBLE), p_value * (CAST(m AS DOUBLE) / CAST(i AS DOUBLE))) AS bh_step  -- m / i first: p at i = m
    FROM ranked
)
SELECT
    row_id,
    CAST(m AS BIGINT) AS family_size,
    max(holm_step) OVER (PARTITION BY family ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        AS p_holm,
    min(bh_step) OVER (PARTITION BY family ORDER BY i ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
        AS q_bh
FROM steps
ORDER BY row_id
