"""Dagster software-defined assets, one module per table. Assets are thin: read inputs from the lake,
run a SQL file or a core function, write one Parquet table atomically, return metadata."""
