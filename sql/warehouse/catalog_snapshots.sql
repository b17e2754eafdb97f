-- The lake's kept snapshots, as a table inside each snapshot's catalog (`lake_snapshots`): which run
-- committed each one, when, with which tables; `autheval query --snapshot N` reads an earlier one.
CREATE OR REPLACE TABLE lake_snapshots AS
SELECT snapshot, run_id, parent, committed_at, software, tables, served
FROM snapshot_rows
ORDER BY snapshot
