-- A fragment of recurring/monitor_look_records.sql: a row's number in the look's log (landed file, then its row).
row_number() OVER (ORDER BY r.landed_file, r.landed_key, r.row_index) - 1
