-- The reference files the lake was built from, with their SHA-256 and rows. Input: input_files.
SELECT name, source AS location, source_sha256 AS sha256, CAST(NULL AS VARCHAR) AS expected_sha256,
       rows
FROM input_files
ORDER BY name
