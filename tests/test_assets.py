"""The assets are thin, one code path with the library: the lake's raw-path tables equal run_raw_path's
(unreadable images and format mismatches included), side tables are declared assets with lineage,
blocking checks stop the report and the catalog, skipped checks are not counted as passed, every table
carries Dagster's standard metadata, resources follow the environment through EnvVar, and the catalog's
pool limit lives in the definitions."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
import yaml
from dagster import DagsterInstance, EnvVar, build_resources, materialize
from PIL import Image

from assets.resources import LAKE_ENV, SOURCE_ENV, SourceResource
from dagster_project.definitions import (
    CATALOG_POOL,
    INSTANCE_SETTINGS,
    POOL_LIMITS,
    build_definitions,
    instance_yaml,
    project_instance,
    study_assets,
)
from dagster_project.demo import QUIET, RAW_STAGES, run_stages
from tests.conftest import ROOT
from warehouse.catalog import query
from warehouse.lake import DEFAULT_LAKE, Lake

RAW_TABLES = [
    "input_files",
    "images",
    "image_hashes",
    "hash_failures",
    "ingest_report",
    "duplicates",
    "duplicate_removals",
    "clusters",
    "duplicate_report",
]
UNREADABLE, PNG_AS_JPG = 3, 5  # positions (in file-name order) of the two spoiled images


@pytest.fixture(scope="module")
def spoiled_cohort(tmp_path_factory):
    """A synthetic cohort with one image that cannot be decoded and one PNG saved under a .jpg name."""
    from autheval.raw.synth import synth_cohort

    cohort = synth_cohort(36, tmp_path_factory.mktemp("cohort"), seed=17, size=(160, 120))
    files = sorted(cohort.images.glob("*.jpg"))
    files[UNREADABLE].write_bytes(b"\xff\xd8\xff not a JPEG after all")
    with Image.open(files[PNG_AS_JPG]) as image:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
    files[PNG_AS_JPG].write_bytes(buffer.getvalue())
    return cohort, files[UNREADABLE].stem, files[PNG_AS_JPG].stem


@pytest.fixture(scope="module")
def raw_lake(spoiled_cohort, tmp_path_factory):
    cohort, _, _ = spoiled_cohort
    root = tmp_path_factory.mktemp("lake")
    source = SourceResource(kind="synthetic", input_dir=str(cohort.root), workers=1)
    checks = run_stages(root, RAW_STAGES, out=lambda line: None, source=source, extra=("catalog",))
    return root, source, checks


def plain(table: pa.Table) -> pa.Table:
    return table.replace_schema_metadata(None)


def test_the_lake_reports_what_the_library_reports(spoiled_cohort, raw_lake):
    from autheval.raw.duplicates import AUTHEVAL_RULES, find_duplicates
    from autheval.raw.pipeline import run_raw_path

    cohort, unreadable, png = spoiled_cohort
    root, _, _ = raw_lake
    library = run_raw_path(cohort.root, workers=1, progress=False, checksums=False)
    lake = Lake(root)
    for name in RAW_TABLES:
        assert plain(lake.read(name)).equals(library[name]), name
    # what both report: the unreadable image is left out and said so, the PNG is kept and said so
    report = {(r["image_id"], r["reason"]): r for r in lake.read("ingest_report").to_pylist()}
    assert report[(unreadable, "unreadable_image")]["action"] == "excluded"
    assert report[(png, "format_mismatch")]["action"] == "kept"
    assert "JPEG" in report[(png, "format_mismatch")]["value"] and "PNG" in report[(png, "format_mismatch")]["value"]
    images = lake.read("images").column("image_id").to_pylist()
    clusters = lake.read("clusters").column("image_id").to_pylist()
    assert len(images) == len(clusters) == 35 and unreadable not in images and png in clusters
    assert lake.read("hash_failures").column("image_id").to_pylist() == [unreadable]
    formats = {(r["image_id"], r["format"]) for r in lake.read("image_hashes").to_pylist()}
    assert (png, "PNG") in formats and {f for _, f in formats} == {"JPEG", "PNG"}
    # the report reuses the duplicates found once; it equals a second search with the splits
    again = find_duplicates(
        library["image_hashes"], AUTHEVAL_RULES, splits=library["clusters"].select(["image_id", "split"])
    )
    assert plain(lake.read("duplicate_report")).equals(again)


def test_duplicate_report_does_not_search_again(raw_lake, monkeypatch):
    root, source, _ = raw_lake
    before = Lake(root).read("duplicate_report")

    def no_search(*args, **kwargs):
        raise AssertionError("duplicate_report searched for near duplicates again")

    monkeypatch.setattr("autheval.raw.duplicates.near_pairs", no_search)
    result = materialize(
        study_assets(),
        selection=["duplicate_report"],
        resources=build_definitions(str(root), source).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
    )
    assert result.success
    assert Lake(root).read("duplicate_report").equals(before)


def test_skipped_checks_are_not_counted_as_passed(raw_lake):
    _, _, checks = raw_lake
    assert "duplicate_report_matches_published" in checks.skipped
    assert "duplicate_report_matches_published" not in checks  # neither passed nor failed
    assert checks and all(checks.values()), checks


def test_every_table_carries_row_count_and_column_schema(raw_lake):
    root, source, _ = raw_lake
    ingest = ["input_files", "image_hashes", "hash_failures", "images", "ingest_report"]  # one step, all or none
    result = materialize(
        study_assets(),
        selection=[*ingest, "duplicates", "duplicate_removals"],
        resources=build_definitions(str(root), source).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
    )
    events = {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }
    assert set(events) == {
        "input_files",
        "image_hashes",
        "hash_failures",
        "images",
        "ingest_report",
        "duplicates",
        "duplicate_removals",
    }
    lake = Lake(root)
    for name, metadata in events.items():
        table = lake.read(name)
        assert metadata["dagster/row_count"].value == table.num_rows, name
        schema = metadata["dagster/column_schema"].schema
        assert [c.name for c in schema.columns] == table.column_names, name
        assert [c.type for c in schema.columns] == [str(f.type) for f in table.schema], name


def test_side_tables_are_assets_with_lineage():
    graph = build_definitions("/nonexistent-lake").resolve_asset_graph()
    parents = {
        k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()
    }
    assert parents["input_files"] == set()
    assert {"input_files"} <= parents["hash_failures"]
    assert {"input_files", "hash_failures"} <= parents["images"]
    assert {"hash_failures", "image_hashes"} <= parents["ingest_report"]
    assert parents["duplicate_removals"] == {"duplicates"}
    assert {"images", "image_hashes", "duplicates", "duplicate_removals"} <= parents["clusters"]
    assert {"duplicates", "clusters"} <= parents["duplicate_report"]


# -- blocking checks: a small two-mechanism study written straight into a lake as `records` -----------


def mechanism_records() -> pa.Table:
    rows = []
    for arm, shift in (("LLaVA-Med head", 0), ("CLIP probe", 1)):
        for i in range(24):
            head, sel = f"a{(i + shift) % 4}", f"a{(i + shift) % 4 if i % 3 else (i + shift + 1) % 4}"
            u_sel = -0.25 * ((i * 7 + shift) % 5)
            u_head = u_sel if head == sel else u_sel - 0.5 - 0.1 * (i % 4)
            rows.append(
                dict(
                    analysis=arm,
                    study="mechanisms",
                    mechanism=arm,
                    regime="capacity_ceiling",
                    case_id=f"img{i:03d}",
                    cluster_id=f"c{i // 2:02d}",
                    proposed_action=head,
                    executed_action=sel,
                    utility_executed_local=u_sel,
                    utility_proposed_local=u_head,
                    utility_proposed_global=-1.0 * (i % 3),
                    record_level="full_counterfactual",
                )
            )
    return pa.Table.from_pylist(rows)


@pytest.fixture
def records_lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write("records", mechanism_records())
    return lake


PUBLISH = ["estimates", "contrasts", "intervals", "study_summary", "report", "catalog"]


def publish(lake: Lake):
    return materialize(
        study_assets(),
        selection=PUBLISH,
        resources=build_definitions(str(lake.root)).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
        raise_on_error=False,
    )


def test_published_numbers_are_reported_when_the_checks_pass(records_lake):
    result = publish(records_lake)
    assert result.success
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert done == set(PUBLISH)
    ran = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert ran == {"estimates_gap_identity": True, "estimates_supported_by_record_level": True}
    # no reference analysis here: the published-summary check did not run and is not reported as passed


@pytest.mark.parametrize(
    "check_sql, broken",
    [
        ("estimates/check_estimates_identity", {"max_residual": 0.5}),
        ("estimates/check_estimates_supported", {"violations": 3}),
    ],
)
def test_a_failed_blocking_check_stops_report_and_catalog(records_lake, monkeypatch, check_sql, broken):
    import assets.estimates

    real = assets.estimates.check_row

    def spoiled(lake, sql_name, *args, **kwargs):
        row = real(lake, sql_name, *args, **kwargs)
        return {**row, **broken} if sql_name == check_sql else row

    monkeypatch.setattr(assets.estimates, "check_row", spoiled)
    served = records_lake.snapshot()
    result = publish(records_lake)
    assert not result.success
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert done == {"estimates", "contrasts", "intervals"}
    # the failed run committed nothing: the lake serves the snapshot it had, and its staged files are gone
    assert records_lake.snapshot() == served and set(records_lake.tables()) == {"records"}
    assert not (records_lake.root / "reports" / "report.md").exists()
    assert query(records_lake, "select count(*) as n from lake_snapshots").to_pylist() == [{"n": 1}]
    assert [p.name for p in (records_lake.root / "runs").iterdir()] == [served.run_id]


def test_the_demo_stops_at_a_failed_blocking_check_and_tallies_skipped_checks(records_lake, monkeypatch):
    import assets.estimates
    from dagster_project.demo import BlockingCheckFailed

    checks = run_stages(records_lake.root, stages=("estimates", "reports"), out=lambda line: None)
    served = records_lake.snapshot()
    assert checks == {
        "estimates_gap_identity": True,
        "estimates_supported_by_record_level": True,
        "monitor_has_no_alerts": True,
    }  # the recurring step: nothing landed, nothing alerts
    assert checks.skipped == ["estimates_match_published_summary"]  # no reference analysis: not run, not passed
    (records_lake.root / "reports" / "report.md").unlink()
    real = assets.estimates.check_row
    monkeypatch.setattr(
        assets.estimates,
        "check_row",
        lambda lake, name, *a, **k: {
            **real(lake, name, *a, **k),
            **({"max_residual": 0.5} if name == "estimates/check_estimates_identity" else {}),
        },
    )
    with pytest.raises(
        BlockingCheckFailed, match="stage estimates stopped: blocking asset check failed: estimates_gap_identity"
    ):
        run_stages(records_lake.root, stages=("estimates", "reports"), out=lambda line: None)
    assert not (records_lake.root / "reports" / "report.md").exists()
    assert records_lake.snapshot() == served  # the stopped demo committed nothing


def test_estimates_and_trend_share_one_grouping_function():
    from autheval.records.recordsets import recordsets_by
    from warehouse.sql import connect

    con = connect()
    con.register("records", mechanism_records())
    sets = recordsets_by(
        con, "records", "records/records_of_analysis", [(a, {"analysis": a}) for a in ("CLIP probe", "LLaVA-Med head")]
    )
    assert [(s.analysis, s.source, s.n_cases, s.level) for s in sets] == [
        ("CLIP probe", "lake:records/CLIP probe", 24, "full_counterfactual"),
        ("LLaVA-Med head", "lake:records/LLaVA-Med head", 24, "full_counterfactual"),
    ]
    assert sets[0].data_sha256 != sets[1].data_sha256


# -- resources and instance settings ------------------------------------------------------------------


def test_resources_follow_the_environment_through_envvar(tmp_path, monkeypatch):
    monkeypatch.setenv(LAKE_ENV, str(tmp_path / "first"))
    monkeypatch.setenv(SOURCE_ENV, "synthetic")
    defs = build_definitions()
    assert isinstance(defs.resources["lake"].root, EnvVar)
    monkeypatch.setenv(LAKE_ENV, str(tmp_path / "second"))  # read when a run starts, not when defs load
    with build_resources(defs.resources) as resources:
        assert resources.lake.lake().root == (tmp_path / "second").resolve()
        assert resources.source.kind == "synthetic"
    monkeypatch.delenv(LAKE_ENV)
    monkeypatch.delenv(SOURCE_ENV)
    with build_resources(build_definitions().resources) as resources:  # unset: the defaults, no error
        assert resources.lake.root == str(DEFAULT_LAKE)
        assert resources.source.kind == "reference"


def test_the_catalog_pool_limit_lives_in_the_definitions():
    catalog = next(
        a for a in study_assets() if getattr(a, "keys", None) and "catalog" in {k.to_user_string() for k in a.keys}
    )
    assert catalog.op.pool == CATALOG_POOL
    assert POOL_LIMITS == {CATALOG_POOL: 1}
    instance = project_instance()
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    assert instance.event_log_storage.get_concurrency_info(CATALOG_POOL).slot_count == 1
    # `dagster dev` from the repository (no DAGSTER_HOME) reads ./dagster.yaml: the same settings
    assert yaml.safe_load((ROOT / "dagster.yaml").read_text()) == INSTANCE_SETTINGS == yaml.safe_load(instance_yaml())


def test_demo_command_exits_1_with_one_line_on_a_failed_blocking_check(monkeypatch, tmp_path, capsys):
    import dagster_project.demo as demo
    from autheval.cli.main import main

    def stop(*args, **kwargs):
        tally = demo.CheckTally()
        tally["estimates_gap_identity"] = False
        raise demo.BlockingCheckFailed("estimates", tally)

    monkeypatch.setattr(demo, "run_stages", stop)
    assert main(["demo", "--lake", str(tmp_path / "lake")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("autheval: error: stage estimates stopped") and "estimates_gap_identity" in err[-1]
