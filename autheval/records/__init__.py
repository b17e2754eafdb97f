"""Records: reading a log or case trace, its schema and level, datasets, registration on DuckDB, and the
per-cluster sufficient statistics."""
