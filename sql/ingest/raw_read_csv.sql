-- A metadata or labels CSV with every column as text, and pandas' default missing-value markers read
-- as NULL: the reference preparation read these files with pandas, so "NA", "nan", "" etc. are
-- missing there, and must be missing here for the profile signatures (and cluster keys) to agree.
-- Parameter $1: the file path.
SELECT *
FROM read_csv(
    $1,
    all_varchar = true,
    header = true,
    nullstr = ['', '#N/A', '#N/A N/A', '#NA', '-1.#IND', '-1.#QNAN', '-NaN', '-nan', '1.#IND',
               '1.#QNAN', '<NA>', 'N/A', 'NA', 'NULL', 'NaN', 'None', 'n/a', 'nan', 'null']
)
