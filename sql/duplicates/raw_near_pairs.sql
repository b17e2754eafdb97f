-- Pairs of distinct hashes at Hamming distance <= $k, found with a multi-index (pigeonhole) join:
-- the 64 bits are cut into k+1 bands, so two hashes within distance k agree exactly on at least one
-- band. Candidates are pairs sharing a band value (an equi-join, not all pairs); each candidate is
-- verified with popcount(xor) <= k, and a pair found in several bands is kept once.
-- Inputs: hash_values(hid BIGINT, phash UBIGINT) with distinct phash values,
--         hash_bands(band INTEGER, lo INTEGER, mask UBIGINT): band = (phash >> lo) & mask.
-- Parameter $k. Output: hid_a < hid_b, distance. DuckDB-only (xor, bit_count on UBIGINT).
WITH keyed AS (
    SELECT v.hid, v.phash, b.band, (v.phash >> b.lo) & b.mask AS band_key
    FROM hash_values AS v
    CROSS JOIN hash_bands AS b
)
SELECT DISTINCT
    a.hid AS hid_a,
    c.hid AS hid_b,
    CAST(bit_count(xor(a.phash, c.phash)) AS INTEGER) AS distance
FROM keyed AS a
JOIN keyed AS c
  ON a.band = c.band AND a.band_key = c.band_key AND a.hid < c.hid
WHERE bit_count(xor(a.phash, c.phash)) <= $k
