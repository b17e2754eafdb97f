-- A fragment of recurring/monitor_look_records.sql: a row's number in its landed file (no sort of the look).
r.row_index
