-- One catalog view over a lake table's Parquet file(s). {table} and {location} are filled by
-- warehouse/catalog.py with a checked identifier and a quoted literal (DDL takes no parameters).
CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet({location}, union_by_name = true)
