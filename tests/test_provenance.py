"""Every result row names what made it (issue 16 items 2 and 5): data SHA-256, rules (version and
SHA-256), scheme, seed, replicates, engine, software version; mechanism and regime beside every
analysis; a contrast's arms as columns. autheval/estimation/provenance.py stamps them in one way."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autheval import __version__
from autheval.estimation.provenance import PROVENANCE, Provenance, combined_sha256, stamp
from autheval.review.rules import load_rules
from dagster_project.demo import run_stages
from tests.test_cohort_study import cohort_lake  # noqa: F401 -- a pytest fixture (the module-scoped cohort lake), used by name
from warehouse.catalog import query
from warehouse.lake import Lake

RESULT_TABLES = ("estimates", "contrasts", "intervals", "subgroups", "fairness", "study_summary")


@pytest.fixture(scope="module")
def reference_lake(tmp_path_factory):
    from assets.resources import SourceResource

    root = tmp_path_factory.mktemp("provenance") / "lake"
    run_stages(root, out=lambda line: None, source=SourceResource(kind="reference", reps=200))
    return Lake(root)


def nulls(lake: Lake, table: str, columns) -> dict[str, int]:
    counts = query(
        lake,
        f"select count(*) as rows, {', '.join(f'count(*) - count({c}) as {c}' for c in columns)} "  # noqa: S608 -- the fixed RESULT_TABLES and PROVENANCE names
        f"from {table}",
    ).to_pylist()[0]
    return counts


@pytest.mark.parametrize("table", RESULT_TABLES)
def test_every_reference_row_names_its_provenance(reference_lake, table):
    counts = nulls(reference_lake, table, PROVENANCE)
    rows = counts.pop("rows")
    assert rows > 0 or table in ("subgroups", "fairness")  # the reference study ships no image metadata
    assert counts == dict.fromkeys(PROVENANCE, 0), counts
    declared = load_rules()
    found = query(
        reference_lake,
        f"select distinct rule_version, rule_sha256, scheme, seed, reps, engine, "  # noqa: S608 -- table from the fixed RESULT_TABLES
        f"software_version from {table}",
    ).to_pylist()
    assert found in (
        [],
        [
            {
                "rule_version": declared.version,
                "rule_sha256": declared.sha256,
                "scheme": "reference",
                "seed": 20260711,
                "reps": 200,
                "engine": "duckdb",
                "software_version": f"autheval {__version__}",
            }
        ],
    )


def test_estimates_name_the_record_set_and_its_mechanism_and_regime(reference_lake):
    from autheval.records.recordsets import recordsets_by
    from warehouse.sql import connect

    con = connect()
    con.register("records", reference_lake.read("records"))
    analyses = [r["analysis"] for r in query(reference_lake, "select distinct analysis from records").to_pylist()]
    expected = {
        r.analysis: r.data_sha256
        for r in recordsets_by(con, "records", "records/records_of_analysis", [(a, {"analysis": a}) for a in analyses])
    }
    rows = query(reference_lake, "select distinct analysis, mechanism, regime, data_sha256 from estimates").to_pylist()
    assert {r["analysis"]: r["data_sha256"] for r in rows} == expected
    named = {r["analysis"]: (r["mechanism"], r["regime"]) for r in rows}
    assert named["mixed"] == ("MedGemma readout", "mixed")
    assert named["CLIP probe"] == ("CLIP probe", "capacity_ceiling")
    joined = query(
        reference_lake, "select count(*) as n from estimates e join records r using (analysis, mechanism, regime)"
    )
    assert joined.to_pylist()[0]["n"] > 0
    contrast = query(reference_lake, "select distinct contrast, arm_a, arm_b, data_sha256 from contrasts").to_pylist()
    assert contrast == [
        {
            "contrast": "CLIP probe minus LLaVA-Med head",
            "arm_a": "CLIP probe",
            "arm_b": "LLaVA-Med head",
            "data_sha256": combined_sha256([expected["CLIP probe"], expected["LLaVA-Med head"]]),
        }
    ]


def test_every_cohort_row_names_its_provenance(cohort_lake):  # noqa: F811 -- pytest passes the imported fixture by name
    lake, _, _ = cohort_lake
    for table in RESULT_TABLES:
        counts = nulls(lake, table, PROVENANCE)
        assert counts.pop("rows") > 0, table
        assert counts == dict.fromkeys(PROVENANCE, 0), (table, counts)
    per_cluster = query(lake, "select distinct rule_version, rule_sha256 from contexts").to_pylist()
    assert query(lake, "select distinct rule_version, rule_sha256 from estimates").to_pylist() == per_cluster
    unnamed = query(lake, "select count(*) as n from subgroups where mechanism is null or regime is null")
    assert unnamed.to_pylist() == [{"n": 0}]


def test_stamp_replaces_appends_and_keeps_a_rows_own_hash():
    table = pa.table({"analysis": ["a", "b", "c"], "scheme": ["old"] * 3, "data_sha256": [None, "own", None]})
    out = stamp(
        table,
        Provenance(scheme="poisson", seed=7, reps=99, engine="spark", rule_version="v1", rule_sha256="r1"),
        {"a": "ha", "b": "hb", "c": "hc"},
        rules={"c": ("v2", "r2")},
    )
    assert out.column_names == ["analysis", *PROVENANCE]
    assert out.column("data_sha256").to_pylist() == ["ha", "own", "hc"]
    assert out.column("rule_version").to_pylist() == ["v1", "v1", "v2"]
    assert out.column("rule_sha256").to_pylist() == ["r1", "r1", "r2"]
    assert out.column("scheme").to_pylist() == ["poisson"] * 3 and out.column("engine").to_pylist() == ["spark"] * 3
    assert out.schema.field("seed").type == pa.int64() and out.column("reps").to_pylist() == [99] * 3
    assert combined_sha256(["x", "y"]) == combined_sha256(["y", "x"]) != combined_sha256(["x", "z"])


def test_every_proposal_names_its_producer(reference_lake, cohort_lake):  # noqa: F811 -- pytest passes the imported fixture by name
    from autheval.io import file_sha256
    from autheval.reference_data import manifest

    rows = query(
        reference_lake, "select distinct mechanism, producer, producer_sha256 from proposals order by 1"
    ).to_pylist()
    files = manifest()
    assert rows[0] == {
        "mechanism": "CLIP probe",
        "producer": f"reference:{files['trace_clip_probe']['source']}",
        "producer_sha256": files["trace_clip_probe"]["parquet_sha256"],
    }
    assert len(rows) == 3 and all(r["producer_sha256"] for r in rows)
    lake, cohort, _ = cohort_lake
    rows = query(lake, "select distinct mechanism, producer, producer_sha256 from proposals").to_pylist()
    assert rows and all(r["producer"] and r["producer_sha256"] for r in rows), rows
    proposals_file = cohort.root / "proposals.csv"
    assert {(r["producer"], r["producer_sha256"]) for r in rows} == {
        (f"file:{proposals_file.resolve()}", file_sha256(proposals_file))
    }
