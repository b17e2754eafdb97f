"""The command line: one module per command, registered by `main`; the only floor that may import
`dagster_project`, `assets` or `models`."""
