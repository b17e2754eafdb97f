-- The raw cohort's input files (metadata, labels), their SHA-256 and the expected one where declared.
-- Input: input_files.
SELECT role AS name, path AS location, sha256, expected_sha256, CAST(NULL AS BIGINT) AS rows
FROM input_files
ORDER BY role
