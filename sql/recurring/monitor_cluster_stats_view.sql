-- The per-cluster sums a caller of autheval.monitoring.monitor.confidence_sequences named, under the name
-- sql/estimates/delta_method.sql reads (cluster_stats). {table} is filled with a checked, quoted identifier
-- (DDL takes no parameters).
CREATE OR REPLACE TEMP VIEW cluster_stats AS SELECT * FROM {table}
