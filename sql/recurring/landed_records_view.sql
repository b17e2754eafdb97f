-- The landed logs that count, as the monitor and the trend read them: the view landed_records over
-- landed_source (the lake's landed Parquet files read where they lie, union by name, or an Arrow table
-- registered), every row but those of a file that a later landed file supersedes (as
-- recurring/landed_current.sql), with the deployment columns of a partition landed before logs carried
-- them: site and model_version 'unspecified' (the literal filled in), no risk stratum, the proposal's
-- local score taken as given where the canonical row has one (as with_deployment_columns of
-- autheval.monitoring.landing gives rows held). A landed partition names its site and model version
-- on every row (landing refuses an empty one), so a NULL here is a partition landed before the column
-- existed. A view: each query reads the files again, within DuckDB's memory limit, and no copy of the
-- landed rows is held (`given` not materialized: it is read twice, for the rows and the keys superseded).
CREATE OR REPLACE TEMP VIEW landed_records AS
WITH given AS NOT MATERIALIZED (
    SELECT * FROM landed_source
    UNION ALL BY NAME
    SELECT
        CAST(NULL AS VARCHAR) AS site,
        CAST(NULL AS VARCHAR) AS model_version,
        CAST(NULL AS VARCHAR) AS risk_stratum,
        CAST(NULL AS BOOLEAN) AS proposed_local_given,
        CAST(NULL AS VARCHAR) AS supersedes
    WHERE false
)
SELECT * REPLACE (
    coalesce(site, {unspecified}) AS site,
    coalesce(model_version, {unspecified}) AS model_version,
    coalesce(proposed_local_given, utility_proposed_local IS NOT NULL) AS proposed_local_given
)
FROM given
WHERE landed_key NOT IN (SELECT supersedes FROM given WHERE supersedes IS NOT NULL)
