-- The landed logs that count, as the monitor and the trend read them: the view landed_records, every
-- row of landed_given (recurring/landed_given_view.sql: the landed partitions read where they lie, with
-- their deployment columns) but those of a file that a later landed file supersedes (the lake's monitor
-- and trend, and a site's export of its own logs, held: autheval.sites.monitor). A view: each query
-- reads the files again.
CREATE OR REPLACE TEMP VIEW landed_records AS
SELECT *
FROM landed_given
WHERE landed_key NOT IN (SELECT supersedes FROM landed_given WHERE supersedes IS NOT NULL)
