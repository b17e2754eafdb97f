"""Template files (`{placeholder}`s for what DDL cannot bind) are filled in one place, warehouse.sql.fill:
every placeholder given, nothing else, identifiers checked, literals quoted, one pass."""

from __future__ import annotations

import duckdb
import pytest

from warehouse.sql import drop_view, fill


def test_a_template_is_filled_with_quoted_names_and_values():
    text = fill(
        "records/records_dataset_lake",
        identifiers={"view": "scan"},
        literals={"analysis": "it's"},
        fragments={"files": "['a.parquet']"},
    )
    assert '"scan"' in text and "'it''s'" in text and "['a.parquet']" in text
    code = "\n".join(line.split("--")[0] for line in text.splitlines())  # comments keep the names (not filled)
    assert "{view}" not in code and "{analysis}" not in code and "{files}" not in code


def test_a_filled_value_is_never_read_as_a_placeholder():
    text = fill(
        "records/records_dataset_lake",
        identifiers={"view": "scan"},
        literals={"analysis": "{files}"},
        fragments={"files": "['a.parquet']"},
    )
    assert "'{files}'" in text


@pytest.mark.parametrize(
    "given, rule",
    [
        ({"identifiers": {"view": "scan"}}, "takes the placeholders"),  # {files} and {analysis} missing
        (
            {
                "identifiers": {"view": "scan", "extra": "x"},
                "literals": {"analysis": "a"},
                "fragments": {"files": "[]"},
            },
            "takes the placeholders",
        ),
        (
            {
                "identifiers": {"view": 'x"; drop table t; --'},
                "literals": {"analysis": "a"},
                "fragments": {"files": "[]"},
            },
            "not a plain lower-case identifier",
        ),
    ],
)
def test_a_wrong_fill_is_refused(given, rule):
    with pytest.raises(ValueError, match=rule):
        fill("records/records_dataset_lake", **given)


def test_drop_view_drops_only_that_view():
    con = duckdb.connect()
    con.execute("create view kept as select 1 as x")
    con.execute("create view gone as select 2 as x")
    drop_view(con, "gone")
    drop_view(con, "gone")  # if exists: twice is no error
    names = {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert names == {"kept"}


@pytest.mark.parametrize(
    "name",
    [
        "",
        "review",
        "../warehouse/drop_table",
        "review/../review/records",
        "Review/records",
        "review/records.sql",
        "review/records/x",
    ],
)
def test_a_sql_name_is_stage_slash_name_and_nothing_else(name):
    from warehouse.sql import load_sql

    with pytest.raises(ValueError, match="expected stage/name"):
        load_sql(name)


def test_a_missing_sql_file_names_its_path():
    from warehouse.sql import load_sql

    with pytest.raises(FileNotFoundError, match="no SQL file review/nope.sql"):
        load_sql("review/nope")
