-- Drop a stage's table before it is rebuilt on the same connection. {table} is filled by
-- warehouse.sql.drop_table (through fill) with a checked, quoted identifier (DDL takes no parameters).
DROP TABLE IF EXISTS {table}
