-- The landed logs that count: every row of landed_records but those of a file a later landed file
-- declares it supersedes (its `supersedes` column names the earlier file's content key). The superseded
-- partition stays in the lake, marked by its successor (the lake's monitor and trend read the same rows
-- through recurring/landed_records_view.sql).
SELECT *
FROM landed_records
WHERE landed_key NOT IN (SELECT supersedes FROM landed_records WHERE supersedes IS NOT NULL)
