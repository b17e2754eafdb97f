-- Canonical records held in memory (autheval.records.read.records_from_table) in the layout of
-- records/records_dataset_canonical.sql, so held and dataset records can be read as one `records` view.
-- {rows} is a checked identifier filled by autheval/records/registration.py.
SELECT
    CAST(analysis AS VARCHAR) AS analysis, row_index, case_id, cluster_id, proposed_action, executed_action,
    intervened, utility_executed_local, utility_proposed_local, utility_proposed_global
FROM {rows}
