-- Drop a temporary view (a dataset's scan, once validated). {view} is filled by autheval/records/read.py
-- with a checked, quoted identifier (DDL takes no parameters).
DROP VIEW IF EXISTS {view}
