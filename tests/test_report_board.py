"""What a board reads (issue 28 section 2): a report for a lake of landed logs alone (no reference study),
both units of the gap and their disagreement in plain words, the cohort report (the estimated skin-tone
grouping named as an estimate, the benchmark and transfer tables, fairness intervals where the lake has
them, Markdown without HTML escapes), and the trend picture per site x model version."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from autheval.reporting.report import build_report, html_report, markdown_report, report_queries
from autheval.reporting.report.document import ReportInputs
from autheval.reporting.report.words import SECTION_TITLES
from tests.conftest import land_and_monitor
from warehouse import sql

ENTITY = re.compile(r"&(?:[A-Za-z]+|#[0-9]+|#x[0-9A-Fa-f]+);")


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


NO_ROWS = pa.table({})  # a study_summary with no rows (None: the lake has no such table)


def inputs_from(tables: dict[str, pa.Table], summary: pa.Table | None = NO_ROWS) -> ReportInputs:
    """ReportInputs as the report asset makes them: the report's SQL files over the given tables."""
    con = sql.connect()
    for name, table in tables.items():
        con.register(name, table)
    columns = {name: table.column_names for name, table in tables.items()}
    parts = {part: sql.run(con, name).to_pylist() for part, name in report_queries(columns).items()}
    return ReportInputs(summary=summary, contrasts=tables.get("contrasts"), parts=parts, columns=columns)


# --- 2.1: a lake of landed logs alone -----------------------------------------------------------------


@pytest.fixture(scope="module")
def landed_lake(tmp_path_factory):
    """A lake made as docs/monitoring.md says: a simulated deployment's monthly logs (2 sites x 3 months,
    site-2 on model v2 from month 2) landed and monitored by `autheval monitor run`; no demo run."""
    from autheval.monitoring.deployment_sim import DeploymentModel

    model = DeploymentModel(sites=2, months=3, clusters_per_month=30)
    lake, code = land_and_monitor(
        tmp_path_factory.mktemp("landed"), model, "site-2:proposer_quality:-0.5:from=2:version=v2"
    )
    assert code in (0, 3)
    return lake


def test_a_lake_of_landed_logs_alone_gets_its_report(landed_lake):
    from assets.reports import report
    from assets.resources import LakeResource
    from warehouse.lake import Lake

    store = Lake(landed_lake)
    assert not store.has_table("study_summary") and store.has_table("monitor")
    report(LakeResource(root=str(landed_lake)))  # the report asset, as a run materializes it
    md = (landed_lake / "reports" / "report.md").read_text()
    page = (landed_lake / "reports" / "report.html").read_text()
    for title in SECTION_TITLES.values():
        assert f"\n## {title}\n" in md, title
    assert "landed monitoring logs" in md.split("\n## ")[0]
    summary = section(md, SECTION_TITLES["summary"])
    assert "no study_summary table" in summary and "no reference study or cohort" in summary
    assert "This lake has no study_summary table" in section(md, SECTION_TITLES["forest"])
    assert "This lake has no subgroups table" in section(md, SECTION_TITLES["subgroups"])
    monitoring = section(md, SECTION_TITLES["monitoring"])
    assert "Nothing is monitored" not in monitoring and "| site-2 | v2 |" in monitoring
    assert "report_monitor.png" in monitoring and (landed_lake / "reports" / "report_monitor.png").exists()
    assert "forest_plot.png" not in md and "<h2>Monitoring a deployment</h2>" in page


def test_a_lake_with_nothing_in_it_gets_a_report_that_says_so():
    doc = build_report(inputs_from({}, summary=None))
    md, page = markdown_report(doc), html_report(doc)
    assert "nothing evaluated yet" in md.split("\n## ")[0]
    assert "This lake has no study_summary table" in section(md, SECTION_TITLES["forest"])
    assert "This lake has no monitor table" in section(md, SECTION_TITLES["monitoring"])
    assert doc.images() == {} and "<img" not in page


# --- 2.3: both units and their disagreement ------------------------------------------------------------


def gap_rows(analysis: str, image: tuple, cluster: tuple) -> list[dict]:
    """An analysis's estimate rows as the estimates table has them: p, delta and the gap in both units."""

    def row(unit, metric, estimate, lo, hi):
        return dict(
            study="regimes",
            analysis=analysis,
            record_level="full_counterfactual",
            unit=unit,
            metric=metric,
            estimate=estimate,
            ci_lower=lo,
            ci_upper=hi,
            n=3967,
            n_clusters=2090,
            available=True,
            status="estimated",
            reason=None,
            analysis_order=0,
        )

    return [
        row("image_weighted", "intervention_rate", 0.47, 0.44, 0.50),
        row("image_weighted", "delta", 0.797, 0.195, 1.392),
        row("image_weighted", "Delta_authority", *image),
        row("cluster_equal", "Delta_authority", *cluster),
    ]


def units_report(*analyses) -> tuple[str, str]:
    rows = [r for a in analyses for r in gap_rows(*a)]
    for i, r in enumerate(rows):
        r["analysis_order"] = i // 4
    doc = build_report(inputs_from({"estimates": pa.Table.from_pylist(rows)}))
    return section(markdown_report(doc), SECTION_TITLES["summary"]), html_report(doc)


def paragraph(summary: str, analysis: str) -> str:
    return next(line for line in summary.splitlines() if line.startswith(f"**{analysis}** ("))


def test_opposite_units_both_excluding_zero_are_flagged_and_no_direction_concluded():
    # the reference study's mixed: +0.374 image-weighted, -0.206 cluster-equal, both intervals exclude zero
    summary, page = units_report(("mixed", (0.374, 0.091, 0.663), (-0.206, -0.373, -0.037)))
    text = paragraph(summary, "mixed")
    assert "**The two units disagree:**" in text
    assert "image-weighted (each image counts once) the gap is positive +0.374 [+0.091, +0.663]" in text
    assert "cluster-equal (each lesion cluster counts once) it is negative -0.206 [-0.373, -0.037]" in text
    assert "no single direction is concluded" in text and "overstates" not in text
    assert "> **The units disagree in 1 of 1 analyses** (mixed)" in summary
    assert "<strong>The two units disagree:</strong>" in page and "<p class='callout'><strong>The units" in page


def test_one_unit_excluding_zero_and_the_other_not_is_flagged():
    summary, page = units_report(("capacity", (0.744, 0.491, 1.010), (0.056, -0.107, 0.218)))
    text = paragraph(summary, "capacity")
    assert "**The two units disagree:**" in text and "shown in one unit only" in text
    assert "+0.056 [-0.107, +0.218], but its 95% interval includes zero" in text
    assert "overstates" not in text and "The units disagree in 1 of 1" in summary


def test_units_that_agree_are_both_stated_and_concluded():
    summary, page = units_report(
        ("agree", (0.3, 0.1, 0.5), (0.2, 0.05, 0.35)),
        ("neither", (0.1, -0.1, 0.3), (-0.05, -0.2, 0.1)),  # opposite points, both include zero: no flag
    )
    text = paragraph(summary, "agree")
    assert "excludes zero in both units (image-weighted and cluster-equal)" in text and "overstates" in text
    neither = paragraph(summary, "neither")
    assert "includes zero in both units" in neither and "disagree" not in neither
    assert "The units disagree in" not in summary and "disagree:" not in page


# --- 2.4: the cohort report -----------------------------------------------------------------------------

HOSTILE = "<script>alert('x')</script> & &amp; &#60; [a](javascript:x) *b* $c$"


def cohort_tables(intervals: bool) -> dict[str, pa.Table]:
    subgroups = [
        dict(
            analysis="m / mixed",
            grouping=grouping,
            group_value=value,
            n_images=20,
            n_clusters=10,
            estimable=estimable,
            reason=None if estimable else "not estimable: 4 images",
            accuracy_proposal=0.5,
            accuracy_selected=0.6,
            metric="Delta_authority",
            unit="image_weighted",
            estimate=0.2 if estimable else None,
            ci_lower=0.1 if estimable else None,
            ci_upper=0.3 if estimable else None,
            p_adjusted=0.01,
            q_value=0.01,
            family_size=4,
            excludes_zero=estimable,
            excludes_zero_adjusted=estimable,
            status="estimated",
        )
        for grouping, value, estimable in (
            ("ita_category", "very_light", True),
            ("ita_category", "dark", False),
            ("age_band", "<30", True),
            ("sex", HOSTILE, True),
        )
    ]
    fairness = [
        dict(
            analysis="m / mixed",
            grouping=grouping,
            n_groups=4,
            worst_group_proposal="dark",
            min_accuracy_proposal=0.4,
            max_accuracy_proposal=0.8,
            fairness_proposal=0.5,
            worst_group_selected="dark",
            min_accuracy_selected=0.6,
            max_accuracy_selected=0.8,
            fairness_selected=0.75,
            **(
                dict(
                    fairness_proposal_ci_lower=0.31,
                    fairness_proposal_ci_upper=0.72,
                    fairness_selected_ci_lower=0.52,
                    fairness_selected_ci_upper=0.93,
                    best_group_proposal="light",
                    best_group_selected="light",
                    reason=None,
                    unit="image_weighted",
                    interval_method="bootstrap_reference",
                    scheme="reference",
                    seed=20260711,
                    reps=5000,
                )
                if intervals
                else {}
            ),
        )
        for grouping in ("ita_category", "sex")
    ]
    benchmark = [
        dict(
            mechanism="m",
            model="tiny-vlm",
            scope="all",
            axis=None,
            task=None,
            n_items=120,
            n_clusters=60,
            accuracy=0.625,
            ci_lower=0.55,
            ci_upper=0.70,
            available=True,
            reason=None,
        )
    ]
    bench_fair = [
        dict(
            mechanism="m",
            model="tiny-vlm",
            task=None,
            grouping="ita_category",
            n_groups=3,
            worst_group="dark",
            best_group="light",
            min_accuracy=0.5,
            max_accuracy=0.8,
            fairness_ratio=0.625,
        )
    ]
    transfer = [
        dict(
            analysis="m / mixed",
            analysis_order=0,
            mechanism="m",
            regime="mixed",
            benchmark_model="tiny-vlm",
            benchmark_items=120,
            benchmark_accuracy=0.625,
            benchmark_ci_lower=0.55,
            benchmark_ci_upper=0.70,
            benchmark_available=True,
            benchmark_reason=None,
            J=-1.5,
            J_auth=-0.4,
            intervention_rate=0.375,
            Delta_authority=1.1,
            Delta_authority_ci_lower=0.4,
            Delta_authority_ci_upper=2.2,
            gap_excludes_zero=True,
        )
    ]
    return {
        "subgroups": pa.Table.from_pylist(subgroups),
        "fairness": pa.Table.from_pylist(fairness),
        "benchmark": pa.Table.from_pylist(benchmark),
        "benchmark_fairness": pa.Table.from_pylist(bench_fair),
        "transfer": pa.Table.from_pylist(transfer),
    }


def test_the_estimated_skin_tone_grouping_is_labelled_as_an_estimate_wherever_it_appears():
    doc = build_report(inputs_from(cohort_tables(intervals=False)))
    md, page = markdown_report(doc), html_report(doc)
    for text in (md, page):
        assert "ita_category (estimated)" in text and not re.search(r"ita_category(?! \(estimated\))", text)
    assert md.count("not a recorded attribute") == 2  # subgroups and the benchmark's fairness: each says so
    assert "| m / mixed | ita_category (estimated) | very_light |" in md
    assert "| m | NA | ita_category (estimated) | 3 | dark | light |" in md  # the benchmark's fairness too
    items = section(md, SECTION_TITLES["items"])
    assert "ita_category (estimated)" in items


def test_the_benchmark_and_transfer_tables_are_in_the_report():
    md = markdown_report(build_report(inputs_from(cohort_tables(intervals=False))))
    text = section(md, SECTION_TITLES["benchmark"])
    assert "| m | tiny-vlm | all | NA | NA | 120 | 60 | 62.5% [55.0%, 70.0%] | NA |" in text
    assert "### Transfer" in text
    assert (
        "| m / mixed | tiny-vlm | 62.5% [55.0%, 70.0%] | -1.5000 | -0.4000 | 37.5% | +1.100 [+0.400, +2.200] | yes |"
        in text
    )
    absent = section(markdown_report(build_report(inputs_from({}))), SECTION_TITLES["benchmark"])
    assert "This lake has no benchmark table" in absent and "This lake has no transfer table" in absent


def test_fairness_ratios_carry_their_intervals_where_the_table_has_them():
    with_ci = section(markdown_report(build_report(inputs_from(cohort_tables(True)))), SECTION_TITLES["subgroups"])
    fairness = with_ci.split("### Fairness\n", 1)[1]
    assert "| 0.500 [0.310, 0.720] |" in fairness and "| 0.750 [0.520, 0.930] |" in fairness
    assert "Least fair for the proposal: **0.500 [0.310, 0.720]**" in fairness
    without = section(markdown_report(build_report(inputs_from(cohort_tables(False)))), SECTION_TITLES["subgroups"])
    assert "carries no interval for the ratios" in without.split("### Fairness\n", 1)[1]


def test_report_md_holds_no_html_escapes_and_renders_every_value_as_written():
    import html

    markdown_it = pytest.importorskip("markdown_it")
    md = markdown_report(build_report(inputs_from(cohort_tables(False))))
    assert "| m / mixed | age_band | \\<30 |" in md  # escaped the Markdown way
    assert HOSTILE_MD in md and not ENTITY.findall(md.replace(HOSTILE_MD, ""))  # no entity but the value's own
    assert "drop each month's logs in \\<lake>/landing/" in md
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)
    assert "<script" not in rendered and 'href="javascript' not in rendered and "<em>b</em>" not in rendered
    assert "&lt;lake&gt;/landing/" in rendered
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))  # what a reader sees: every value as written
    assert HOSTILE in text and "<30" in text


def test_a_code_span_shows_its_text_as_written():
    from autheval.reporting.report.document import Document, Section, Text

    doc = Document("t", [], [Section("s", "s", [Text(["run ", ("code", "ls <lake> & `x`")])])])
    assert "run `ls <lake> & 'x'`" in markdown_report(doc)  # no escape works inside a code span


HOSTILE_MD = "\\<script>alert('x')\\</script> & \\&amp; \\&#60; [a\\](javascript:x) \\*b\\* \\$c\\$"
