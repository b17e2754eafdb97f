-- Every pair of distinct hashes at Hamming distance <= $k by brute force over all pairs: the baseline
-- that duplicates/raw_near_pairs.sql must equal (tests, benchmarks/duplicates.py).
-- Input: hash_values(hid BIGINT, phash UBIGINT). Output: hid_a < hid_b, distance.
SELECT
    a.hid AS hid_a,
    c.hid AS hid_b,
    CAST(bit_count(xor(a.phash, c.phash)) AS INTEGER) AS distance
FROM hash_values AS a
JOIN hash_values AS c ON a.hid < c.hid
WHERE bit_count(xor(a.phash, c.phash)) <= $k
