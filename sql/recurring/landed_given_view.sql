-- Every landed row, with the deployment columns of a partition landed before logs carried them: the
-- view landed_given over landed_source (the lake's landed Parquet files read where they lie, union by
-- name: recurring/landed_source_files.sql; or an Arrow table registered). Site and model_version
-- 'unspecified' (the literal filled in), no risk stratum, the proposal's local score taken as given
-- where the canonical row has one (as with_deployment_columns of autheval.monitoring.landing gives rows
-- held). A landed partition names its site and model version on every row (landing refuses an empty
-- one), so a NULL here is a partition landed before the column existed. A view: each query reads the
-- files again, within DuckDB's memory limit, and no copy of the landed rows is held. What counts is
-- recurring/landed_records_view.sql's; a landing's check reads every row (recurring/landed_overlap.sql).
CREATE OR REPLACE TEMP VIEW landed_given AS
SELECT * REPLACE (
    coalesce(site, {unspecified}) AS site,
    coalesce(model_version, {unspecified}) AS model_version,
    coalesce(proposed_local_given, utility_proposed_local IS NOT NULL) AS proposed_local_given
)
FROM (
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
