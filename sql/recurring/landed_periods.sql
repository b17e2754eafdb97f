-- The reporting period of each landed case: the calendar month of its timestamp (YYYY-MM), or its
-- batch label when the log carries a batch column instead. Input: landed_raw(row_index, timestamp,
-- batch) with the absent one NULL. A timestamp that does not parse gives period NULL (reported).
SELECT
    row_index,
    CASE
        WHEN timestamp IS NOT NULL THEN strftime(TRY_CAST(CAST(timestamp AS VARCHAR) AS TIMESTAMP), '%Y-%m')
        ELSE CAST(batch AS VARCHAR)
    END AS period,
    CAST(coalesce(CAST(timestamp AS VARCHAR), CAST(batch AS VARCHAR)) AS VARCHAR) AS period_source
FROM landed_raw
ORDER BY row_index
