-- Drop a temporary view (a dataset's scan, once validated). {view} is filled by warehouse.sql.drop_view
-- with a checked, quoted identifier (DDL takes no parameters).
DROP VIEW IF EXISTS {view}
