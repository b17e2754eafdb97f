-- The typed part of the canonical record, row for row in input order (records/records_typed_columns.sql,
-- filled as {typed}). The text columns are taken from the input as they are.
-- Input: raw_records (validated).
SELECT
{typed}
FROM raw_records
