"""Bad input: one clear line naming the file, the column and the rule; exit code 2; nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

HEADER = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local\n"
GOOD = ["c1,k1,a0,a0,0.0,0.0", "c2,k2,a1,a0,-1.0,-2.0", "c3,k2,a2,a2,-0.5,-0.5"]
GLOBAL = HEADER.strip() + ",utility_proposed_global\n"
GOOD_GLOBAL = [row + ",-1.0" for row in GOOD]


def write(tmp_path: Path, text: str, name: str = "log.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


CASES = [
    ("empty file", "", None, "file is empty"),
    ("header only", HEADER, None, "no records"),
    ("missing column", "case_id,proposed_action,executed_action\nc1,a0,a0\n",
     "utility_executed_local", "required column is missing"),
    ("duplicate case id", HEADER + "\n".join([*GOOD, "c1,k3,a0,a0,0.0,0.0"]) + "\n", "case_id", "must be unique"),
    ("null case id", HEADER + "\n".join([*GOOD, ",k3,a0,a0,0.0,0.0"]) + "\n", "case_id", "must not be empty"),
    ("null cluster id", HEADER + "\n".join([*GOOD, "c4,,a0,a0,0.0,0.0"]) + "\n", "cluster_id", "must not be empty"),
    ("non-numeric utility", HEADER + "\n".join([*GOOD, "c4,k3,a0,a0,abc,0.0"]) + "\n",
     "utility_executed_local", "finite number"),
    ("non-finite utility", HEADER + "\n".join([*GOOD, "c4,k3,a0,a1,-1.0,inf"]) + "\n",
     "utility_proposed_local", "finite number"),
    ("same action different score", HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,-1.0,-2.0"]) + "\n",
     "utility_proposed_local", "identical actions must have identical scores"),
    ("partial proposal score", HEADER + "\n".join([*GOOD, "c4,k3,a3,a1,-1.0,"]) + "\n",
     "utility_proposed_local", "every changed row or on none"),
    ("empty proposed action", HEADER + "\n".join([*GOOD, "c4,k3,,a1,-1.0,-1.0"]) + "\n",
     "proposed_action", "must not be empty"),
    ("empty executed action", HEADER + "\n".join([*GOOD, "c4,k3,a1,,-1.0,-1.0"]) + "\n",
     "executed_action", "must not be empty"),
    ("empty executed utility", HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,,-1.0"]) + "\n",
     "utility_executed_local", "must not be empty"),
    ("non-finite global score", GLOBAL + "\n".join([*GOOD_GLOBAL, "c4,k3,a1,a1,-1.0,-1.0,-inf"]) + "\n",
     "utility_proposed_global", "finite number"),
    ("non-numeric global score", GLOBAL + "\n".join([*GOOD_GLOBAL, "c4,k3,a1,a1,-1.0,-1.0,n/a"]) + "\n",
     "utility_proposed_global", "finite number"),
    ("partial global score", GLOBAL + "\n".join([*GOOD_GLOBAL, "c4,k3,a1,a1,-1.0,-1.0,"]) + "\n",
     "utility_proposed_global", "every row or on none"),
    ("duplicate header column",
     "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,cluster_id\nc1,k1,a0,a0,0.0,k1\n",
     "cluster_id", "more than once"),
    ("duplicate after stripping",
     "case_id,cluster_id,proposed_action,executed_action,utility_executed_local, cluster_id\nc1,k1,a0,a0,0.0,k1\n",
     "cluster_id", "more than once"),
    ("semicolon delimiter", HEADER.replace(",", ";") + "\n".join(r.replace(",", ";") for r in GOOD) + "\n",
     None, "delimiter looks wrong"),
    ("semicolon with decimal commas", "case_id;proposed_action;executed_action;utility_executed_local\nc1;a;a;-0,5\n",
     None, "delimiter looks wrong"),
    ("misspelled column", HEADER.replace("utility_proposed_local", "utility_proposed_locl") + "\n".join(GOOD) + "\n",
     "utility_proposed_locl", "did you mean 'utility_proposed_local'"),
    ("misspelled cluster column", HEADER.replace("cluster_id", "clsuter_id") + "\n".join(GOOD) + "\n",
     "clsuter_id", "did you mean 'cluster_id'"),
    ("misspelled required column", HEADER.replace("case_id", "Case_ID") + "\n".join(GOOD) + "\n",
     "Case_ID", "did you mean 'case_id'"),
    ("overflowing utility", HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,1.5e308,1.5e308"]) + "\n",
     "utility_executed_local", "overflow"),
    ("overflowing sum", HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,1e306,1e306"]) + "\n",
     "utility_executed_local", "overflow"),
    ("overflowing proposal score", HEADER + "\n".join([*GOOD, "c4,k3,a1,a3,-1.0,-1e307"]) + "\n",
     "utility_proposed_local", "overflow"),
    ("overflowing global score", GLOBAL + "\n".join([*GOOD_GLOBAL, "c4,k3,a1,a1,-1.0,-1.0,-9e305"]) + "\n",
     "utility_proposed_global", "overflow"),
    ("trailing space in an executed action", HEADER + "\n".join([*GOOD, "c4,k3,a1,a1 ,-1.0,-1.0"]) + "\n",
     "executed_action", "must not be blank or begin or end with whitespace"),
    ("leading space in a proposed action", HEADER + "\n".join([*GOOD, "c4,k3, a1,a1,-1.0,-1.0"]) + "\n",
     "proposed_action", "begin or end with whitespace"),
    ("trailing space in a cluster id", HEADER + "\n".join([*GOOD, "c4,k2 ,a1,a1,-1.0,-1.0"]) + "\n",
     "cluster_id", "another cluster"),
    ("trailing tab in a case id", HEADER + "\n".join([*GOOD, "c4\t,k3,a1,a1,-1.0,-1.0"]) + "\n",
     "case_id", "begin or end with whitespace"),
    ("blank case id", HEADER + "\n".join([*GOOD, " ,k3,a1,a1,-1.0,-1.0"]) + "\n", "case_id", "must not be blank"),
]  # fmt: skip


@pytest.mark.parametrize("label,text,column,rule", CASES, ids=[c[0] for c in CASES])
def test_bad_log_gets_one_clear_line_and_exit_2(tmp_path, label, text, column, rule):
    path = write(tmp_path, text)
    out = tmp_path / "out"
    result = run_cli("evaluate", "--input", str(path), "--output-dir", str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and rule in lines[0]
    if column:
        assert f"column '{column}'" in lines[0]
    assert not out.exists()


def test_the_example_row_is_named(tmp_path):
    path = write(tmp_path, HEADER + "\n".join([*GOOD, "c4,k3,a0,a0,abc,0.0"]) + "\n")
    result = run_cli("evaluate", "--input", str(path))
    assert "row 4" in result.stderr and "'c4'" in result.stderr and "'abc'" in result.stderr


def test_unknown_file_type(tmp_path):
    path = write(tmp_path, "whatever", name="log.xlsx")
    result = run_cli("evaluate", "--input", str(path))
    assert result.returncode == 2 and "unknown file type" in result.stderr


def test_unknown_schema(tmp_path):
    path = write(tmp_path, "a,b\n1,2\n")
    result = run_cli("evaluate", "--input", str(path))
    assert result.returncode == 2 and "unknown record schema" in result.stderr


def test_trace_errors_name_the_trace_column(tmp_path):
    text = "image_id,cluster_id,a_head,a_exec,Uz_head,Uz_exec\ni1,k1,a0,a0,0.0,nan\n"
    result = run_cli("evaluate", "--input", str(write(tmp_path, text)))
    assert result.returncode == 2 and "column 'Uz_exec'" in result.stderr


def test_a_failed_run_keeps_earlier_outputs(tmp_path):
    good = write(tmp_path, HEADER + "\n".join(GOOD) + "\n", "good.csv")
    bad = write(tmp_path, HEADER + "\n".join([*GOOD, "c1,k3,a0,a0,0.0,0.0"]) + "\n", "bad.csv")
    out = tmp_path / "out"
    assert run_cli("evaluate", "--input", str(good), "--output-dir", str(out), "--reps", "50").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert run_cli("evaluate", "--input", str(bad), "--output-dir", str(out)).returncode == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_parquet_input_is_validated_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "log.parquet"
    pq.write_table(
        pa.table(
            {
                "case_id": ["a", "b"],
                "proposed_action": ["a0", "a1"],
                "executed_action": ["a0", "a0"],
                "utility_executed_local": [0.0, float("nan")],
            }
        ),
        path,
    )
    result = run_cli("evaluate", "--input", str(path))
    assert result.returncode == 2 and "column 'utility_executed_local'" in result.stderr


def test_tsv_with_commas_says_the_delimiter_looks_wrong(tmp_path):
    path = write(tmp_path, HEADER + "\n".join(GOOD) + "\n", name="log.tsv")
    result = run_cli("evaluate", "--input", str(path))
    assert result.returncode == 2 and "delimiter looks wrong" in result.stderr and "comma" in result.stderr


def test_overflow_names_the_largest_value(tmp_path):
    path = write(tmp_path, HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,-1.7e308,-1.7e308"]) + "\n")
    result = run_cli("evaluate", "--input", str(path))
    assert result.returncode == 2 and "row 4" in result.stderr and "'-1.7e308'" in result.stderr


def test_large_but_safe_utilities_are_accepted(tmp_path):
    """The overflow rule is not a magnitude rule: 1e300 on a few rows sums without overflow."""
    from autheval.records.read import read_records

    records = read_records(write(tmp_path, HEADER + "\n".join([*GOOD, "c4,k3,a1,a1,1e300,1e300"]) + "\n"))
    assert records.n_cases == 4


def test_header_names_are_stripped(tmp_path):
    """`cluster_id ` (trailing space) is the cluster column, not an ignored one: same clusters, same
    numbers as the clean header."""
    from autheval.estimation.estimators import estimate
    from autheval.records.read import read_records

    clean = read_records(write(tmp_path, HEADER + "\n".join(GOOD) + "\n", "clean.csv"))
    spaced = read_records(
        write(tmp_path, HEADER.replace("cluster_id", " cluster_id ") + "\n".join(GOOD) + "\n", "spaced.csv")
    )
    assert spaced.n_clusters == clean.n_clusters == 2 and spaced.level == clean.level
    assert spaced.unused_columns == ()
    a = estimate([clean], scheme="reference", reps=1000).estimates
    b = estimate([spaced], scheme="reference", reps=1000).estimates
    assert [(r["estimate"], r["ci_lower"], r["ci_upper"]) for r in a] == [
        (r["estimate"], r["ci_lower"], r["ci_upper"]) for r in b
    ]


def test_edit_distance():
    from autheval.records.schema import closest_name, edit_distance

    assert edit_distance("utility_proposed_locl", "utility_proposed_local") == 1
    assert edit_distance("clsuter_id", "cluster_id") == 1  # a transposition is one edit
    assert edit_distance("cluster", "cluster_id") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "abc") == 0
    assert closest_name("CASE_ID", ["case_id", "cluster_id"]) == "case_id"
    assert closest_name("notes", ["case_id", "cluster_id"]) is None


def test_a_repeated_id_hash_is_confirmed_on_the_ids(monkeypatch):
    """records/records_validate.sql flags a repeated 64-bit hash of the ids; only ids that really repeat are a
    broken rule (two different ids with one hash are not), and then the first duplicate is named."""
    import pyarrow as pa

    from autheval.errors import RecordError
    from autheval.records import read as records
    from warehouse.sql import connect, load_sql

    real = load_sql

    def colliding(name):  # every hash "repeats": the candidate must be checked on the ids
        text = real(name)
        return (
            text.replace("HAVING count(*) > 1", "HAVING count(*) >= 1") if name == "records/records_validate" else text
        )

    monkeypatch.setattr(records, "load_sql", colliding)
    raw = pa.table(
        {
            "row_index": pa.array([0, 1, 2], pa.int64()),
            "case_id": ["c1", "c2", "c3"],
            "cluster_id": ["k1", "k1", "k2"],
            "proposed_action": ["a0"] * 3,
            "executed_action": ["a0"] * 3,
            "utility_executed_local": ["0.0"] * 3,
            "utility_proposed_local": ["0.0"] * 3,
            "utility_proposed_global": pa.nulls(3, pa.string()),
        }
    )
    con = connect()
    con.register("raw_records", raw)
    records.validate(con, "log.csv", "log")  # distinct ids: passes
    con.register("raw_records", raw.set_column(1, "case_id", pa.array(["c1", "c2", "c2"])))
    with pytest.raises(RecordError, match=r"case_id.*must be unique.*row 2, id 'c2', value 'c2'; 2 rows in all"):
        records.validate(con, "log.csv", "log")


def test_whitespace_around_ids_and_actions_is_refused_never_counted_apart(tmp_path):
    """`a1 ` beside `a1` would be a false intervention (p = 0.5 instead of 0.25 here) and `k1 ` an extra
    cluster: refused with the row, id and value, for every kind of whitespace at either end."""
    from autheval.errors import RecordError
    from autheval.records.read import read_records

    rows = ["c1,k1,a1,a1,0.0,0.0", "c2,k1,a1,a0,-1.0,-2.0", "c3,k2,a0,a0,0.0,0.0", "c4,k2,a2,a2,0.0,0.0"]
    assert read_records(write(tmp_path, HEADER + "\n".join(rows) + "\n")).n_changed == 1
    for cell, spaced, column in (
        ("c1,k1,a1,a1,", "c1,k1,a1,a1 ,", "executed_action"),
        ("c1,k1,a1,a1,", "c1,k1,a1\u00a0,a1,", "proposed_action"),
        ("c3,k2,", "c3,k2\u00a0,", "cluster_id"),
        ("c3,k2,", '"c3\r",k2,', "case_id"),
        ("c3,k2,", '"c3",\tk2,', "cluster_id"),
    ):
        text = HEADER + "\n".join(rows).replace(cell, spaced, 1) + "\n"
        with pytest.raises(RecordError) as err:
            read_records(write(tmp_path, text, "spaced.csv"))
        message = str(err.value)
        assert f"column '{column}'" in message and "whitespace" in message and "\n" not in message, message
        assert "row 1" in message or "row 3" in message


def test_whitespace_rules_read_parquet_text_and_skip_integer_ids(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from autheval.errors import RecordError
    from autheval.records.read import read_records

    table = pa.table(
        {
            "case_id": pa.array([1, 2, 3]),
            "cluster_id": pa.array([10, 10, 11]),
            "proposed_action": ["a1", "a1", "a0"],
            "executed_action": ["a1", "a0", "a0"],
            "utility_executed_local": [0.0, -1.0, 0.0],
            "utility_proposed_local": [0.0, -2.0, 0.0],
        }
    )
    pq.write_table(table, tmp_path / "ints.parquet")
    assert read_records(tmp_path / "ints.parquet").n_clusters == 2
    spaced = table.set_column(3, "executed_action", pa.array(["a1", "a0", "a0\n"]).dictionary_encode())
    pq.write_table(spaced, tmp_path / "spaced.parquet")
    with pytest.raises(
        RecordError,
        match=r"column 'executed_action': must not be blank or begin or end with "
        r"whitespace.*row 3, id '3', value 'a0\\n'",
    ):
        read_records(tmp_path / "spaced.parquet")


@pytest.mark.parametrize(
    "column, array, expected",
    [
        (
            "utility_executed_local",
            "float16",
            "must be a number column (float32 or float64, an integer or a decimal) or text; got halffloat",
        ),
        ("utility_proposed_local", "struct", "must be a number column"),
        (
            "utility_executed_local",
            "list",
            "must be a number column (float32 or float64, an integer or a decimal) or text; got list<",
        ),
        ("case_id", "struct", "must be a text column (strings, or integer ids); got struct<x: int64>"),
        ("cluster_id", "binary", "must be a text column (strings, or integer ids); got binary"),
        ("proposed_action", "bool", "must be a text column"),
        ("executed_action", "float64", "must be a text column (strings, or integer ids); got double"),
    ],
)
def test_unsupported_parquet_column_types_are_one_line(tmp_path, column, array, expected):
    """Parquet can hold any Arrow type; one that the record cannot mean is named with its type (not a
    traceback from the engine): float16, structs, lists, binary, booleans, float actions."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = {
        "float16": pa.array(np.array([0.0, -1.0], dtype=np.float16)),
        "struct": pa.array([{"x": 1}, {"x": 2}]),
        "list": pa.array([[0.0], [1.0]]),
        "binary": pa.array([b"k1", b"k2"]),
        "bool": pa.array([True, False]),
        "float64": pa.array([0.0, 1.0]),
    }[array]
    table = pa.table(
        {
            "case_id": ["c1", "c2"],
            "cluster_id": ["k1", "k2"],
            "proposed_action": ["a0", "a1"],
            "executed_action": ["a0", "a0"],
            "utility_executed_local": [0.0, -1.0],
            "utility_proposed_local": [0.0, -2.0],
        }
    )
    table = table.set_column(table.schema.get_field_index(column), column, values)
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    result = run_cli("evaluate", "--input", str(path), "--output-dir", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert f"{path}: column '{column}': {expected}" in lines[0]
    assert not (tmp_path / "out").exists()


def test_trace_type_errors_name_the_trace_column(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from autheval.errors import RecordError
    from autheval.records.read import read_records

    pq.write_table(
        pa.table(
            {
                "image_id": ["i1"],
                "cluster_id": ["k1"],
                "a_head": ["a0"],
                "a_exec": ["a0"],
                "Uz_head": [0.0],
                "Uz_exec": pa.array(np.array([0.0], dtype=np.float16)),
            }
        ),
        tmp_path / "trace.parquet",
    )
    with pytest.raises(RecordError, match="column 'Uz_exec': must be a number column"):
        read_records(tmp_path / "trace.parquet")
