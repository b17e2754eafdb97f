"""The project's SQL files (`*.sql`), shipped as package data.

Every query of the project lives here, one statement per file; `warehouse.sql.load_sql(name)` reads
`<name>.sql` through importlib.resources, so the same files are found in a checkout, an editable
install and a built wheel.
"""
