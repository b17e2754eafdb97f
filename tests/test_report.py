"""The report: a front page a reviewer can read (issue 16 item 7). Every section for the reference lake
and a small synthetic cohort lake, escaping, the adjusted flag in the headline, the not-recoverable
wording, the tiny-model wording, the trend, and a headless Chromium render of the HTML; the plots."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest

from autheval.reporting.report import ReportInputs, build_report, html_report, markdown_report, report_queries
from autheval.reporting.report.reporting_items import TO_BE_SUPPLIED
from autheval.reporting.report.words import SECTION_TITLES
from warehouse.lake import Lake

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
HOSTILE = "<script>alert('x')</script> & $a$"


# --- lakes: the real asset path, built once per module ------------------------------------------------


@pytest.fixture(scope="module")
def reference_lake(tmp_path_factory) -> Lake:
    from dagster_project.demo import run_stages

    root = tmp_path_factory.mktemp("report-reference")
    run_stages(root, out=lambda line: None)
    return Lake(root)


@pytest.fixture(scope="module")
def cohort_lake(tmp_path_factory) -> Lake:
    from assets.resources import ModelsResource, SourceResource
    from autheval.raw.synth import synth_cohort
    from dagster_project.demo import COHORT_STAGES, run_stages

    root = tmp_path_factory.mktemp("report-cohort")
    cohort = synth_cohort(80, root / "cohort", seed=7, size=(160, 120))
    source = SourceResource(
        kind="synthetic", input_dir=str(cohort.root), workers=1, reps=200, evaluate_split="all", min_group_clusters=8
    )
    run_stages(root / "lake", COHORT_STAGES, out=lambda line: None, source=source, models=ModelsResource(enabled=False))
    return Lake(root / "lake")


def report_files(lake: Lake) -> tuple[str, str]:
    return (lake.root / "reports" / "report.md").read_text(), (lake.root / "reports" / "report.html").read_text()


def section(text: str, title: str) -> str:
    """The Markdown of one section (up to the next one)."""
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def assert_self_contained(page: str) -> None:
    assert "<script" not in page.lower() and "javascript:" not in page.lower()
    assert not re.search(r"https?://", page)  # no network: no link, stylesheet or image off the page
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r"src='([^']*)'", page))
    assert "<style>" in page and "<link" not in page


def assert_every_section(md: str, page: str) -> None:
    for title in SECTION_TITLES.values():
        assert f"\n## {title}\n" in md, title
        assert f"<h2>{html.escape(title)}</h2>" in page, title


def test_the_reference_report_has_every_section_and_names_what_made_it(reference_lake):
    from autheval import __version__

    md, page = report_files(reference_lake)
    assert_every_section(md, page)
    assert_self_contained(page)
    assert md.startswith("# AuthEval reference study") and "ISIC 2019 test split" in md.split("\n## ")[0]
    assert page.count("data:image/png;base64,") == 1  # the forest plots: one figure, a panel per group
    assert "One panel per group (regimes, mechanisms)" in section(md, SECTION_TITLES["forest"])
    # every analysis has its paragraph, in the lake's words
    summary = section(md, SECTION_TITLES["summary"])
    for analysis in ("mixed", "capacity_ceiling", "safety_floor", "LLaVA-Med head", "MedGemma readout", "CLIP probe"):
        assert f"**{analysis}** (" in summary, analysis
    assert "full counterfactual record: supports p, delta and Delta" in summary
    assert "local-utility points per changed image" in summary and "a proposal-level evaluation overstates" in summary
    # provenance: this run's id (the snapshot it committed), the one before it, data hashes, software
    served = reference_lake.snapshot()
    provenance = section(md, SECTION_TITLES["provenance"])
    assert f"| this run | {served.run_id} |" in provenance and f"autheval {__version__}" in provenance
    assert "| served snapshot before this run | none" in provenance  # a fresh lake: this run is its first
    estimates = reference_lake.read("estimates").to_pylist()
    assert all(r["data_sha256"] in provenance for r in estimates)
    assert "| reference | bootstrap_reference | 5000 | 20260711 |" in provenance
    named = {(r.get("rule_version"), r.get("rule_sha256")) for r in estimates} - {(None, None)}
    if named:  # the estimates name the rules that scored them
        assert all(f"| {version} | {sha} |" in provenance for version, sha in named)
    else:
        assert "No declared rules in this lake" in provenance
    proposals = reference_lake.read("proposals")
    if "producer_sha256" in proposals.column_names:  # what produced each mechanism's proposals
        assert all(sha in provenance for sha in set(proposals.column("producer_sha256").to_pylist()))
    assert "CLIP probe minus LLaVA-Med head" in section(md, SECTION_TITLES["contrasts"])
    items = section(md, SECTION_TITLES["items"])
    assert "ingestion reported no excluded or flagged row" in items
    assert "594 components of 1777 images" in items  # the published threshold-4 report
    assert TO_BE_SUPPLIED in items


def test_the_cohort_report_has_every_section_and_fills_the_items_from_the_lake(cohort_lake):
    md, page = report_files(cohort_lake)
    assert_every_section(md, page)
    assert_self_contained(page)
    head = md.split("\n## ")[0]
    assert md.startswith("# Synthetic ISIC-shaped cohort") and "The cohort is synthetic" in head
    assert "Tiny models" not in head  # no model ran
    assert "One panel per group (safety_floor, mixed, capacity_ceiling)" in md
    [rules] = cohort_lake.read("contexts").select(["rule_version", "rule_sha256"]).to_pylist()[:1]
    assert f"| {rules['rule_version']} | {rules['rule_sha256']} |" in section(md, SECTION_TITLES["provenance"])
    groups = section(md, SECTION_TITLES["subgroups"])
    assert "exclude zero after the Holm adjustment" in groups and "| sex |" in groups and "### Fairness" in groups
    items = section(md, SECTION_TITLES["items"])
    overrides = {r["override"] for r in cohort_lake.read("selections").to_pylist() if r["override"]}
    assert overrides and all(o in items for o in overrides)  # the human-AI interaction: declared overrides
    assert "### Human-AI interaction per analysis" in items and "### Error cases per analysis" in items
    assert "proposals under-escalated" in items and "source file" in items
    assert "This lake has no trend table" in section(md, SECTION_TITLES["trend"])
    assert not re.search(r"&(?:[a-z]+|#[0-9]+);", md) and "ita_category (estimated)" in groups  # issue 28 2.4
    assert "| ita_category |" not in md and "### Transfer" in section(md, SECTION_TITLES["benchmark"])


class Elements(HTMLParser):
    """The elements of a rendered page (comments are not elements): how many of each tag, and the text
    of its headings."""

    def __init__(self):
        super().__init__()
        self.count: dict[str, int] = {}
        self.text: dict[str, list[str]] = {"h1": [], "h2": [], "h3": []}
        self._open: str | None = None

    def handle_starttag(self, tag, attrs):
        self.count[tag] = self.count.get(tag, 0) + 1
        if tag in self.text:
            self._open = tag
            self.text[tag].append("")

    def handle_endtag(self, tag):
        if tag == self._open:
            self._open = None

    def handle_data(self, data):
        if self._open:
            self.text[self._open][-1] += data


def test_the_html_renders_in_headless_chromium(cohort_lake, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    page = cohort_lake.root / "reports" / "report.html"

    def run(*args):
        with tempfile.TemporaryDirectory() as profile:
            return subprocess.run(
                [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                capture_output=True,
                text=True,
                timeout=120,
            )

    dom = Elements()
    dom.feed(run("--dump-dom").stdout)
    assert dom.text["h2"] == list(SECTION_TITLES.values())  # every section heading is an element of the page
    assert dom.count["img"] == 1 and dom.count["table"] > 10 and "script" not in dom.count
    png = tmp_path / "report.png"
    run(f"--screenshot={png}", "--window-size=1200,3000")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 50_000


# --- the words, from estimates the real estimators made ---------------------------------------------

PROPOSED = ["a0", "a2", "a1", "a3", "a2", "a1", "a0", "a2"]
EXECUTED = ["a0", "a1", "a1", "a2", "a2", "a1", "a0", "a3"]  # 3 of 8 proposals changed


def records(analysis: str, executed: list, local: bool = True, proposed: list = PROPOSED):
    """A small record scored by one rule (case i's reference level is i % 4); `local`: the proposal's
    local score is logged (full counterfactual), else role-separated."""
    from autheval.records.read import records_from_table

    def score(i, action):
        return None if action is None else -1.5 * abs(int(action[1]) - i % 4)

    n = len(executed)
    columns = {
        "case_id": [f"c{i}" for i in range(n)],
        "cluster_id": [f"k{i // 2}" for i in range(n)],
        "proposed_action": proposed[:n],
        "executed_action": pa.array(executed, pa.string()),
        "utility_executed_local": pa.array([score(i, a) for i, a in enumerate(executed)], pa.float64()),
    }
    if local:
        columns["utility_proposed_local"] = [score(i, a) for i, a in enumerate(proposed[:n])]
    return records_from_table(pa.table(columns), "memory", analysis, f"sha-{analysis}")


def summary_of(estimates: pa.Table) -> pa.Table:
    """The study_summary columns the report reads, from estimate rows."""
    rows: dict[str, dict] = {}
    for r in estimates.to_pylist():
        row = rows.setdefault(
            r["analysis"],
            {
                "study": r["study"],
                "analysis": r["analysis"],
                "n_clusters": r["n_clusters"],
                "scheme": r["scheme"],
                "reps": r["reps"],
            },
        )
        if r["unit"] == "image_weighted" and r["metric"] in ("intervention_rate", "delta", "J"):
            row[{"J": "n_images"}.get(r["metric"], r["metric"])] = r["n"] if r["metric"] == "J" else r["estimate"]
        if r["metric"] == "Delta_authority":
            key = "Delta_authority_" + ("image" if r["unit"] == "image_weighted" else "cluster")
            row.update({key: r["estimate"], key + "_ci_lower": r["ci_lower"], key + "_ci_upper": r["ci_upper"]})
    return pa.Table.from_pylist(list(rows.values()))


def inputs_for(recordsets, contrasts=(), study="study", **parts) -> ReportInputs:
    """ReportInputs as the asset makes them, through the report's SQL files, from estimate()."""
    from autheval.estimation.estimators import estimate
    from autheval.estimation.study import contrasts_table, estimates_table
    from warehouse.sql import connect, load_sql

    with pytest.warns(Warning):  # few replicates: the interval ends are noisy
        result = estimate(recordsets, scheme="reference", reps=200, contrasts=contrasts)
    table = estimates_table(result)
    order = {r.analysis: i for i, r in enumerate(recordsets)}
    table = table.append_column("study", pa.array([study] * table.num_rows))
    table = table.append_column(
        "analysis_order", pa.array([order[a] for a in table.column("analysis").to_pylist()], pa.int32())
    )
    con = connect()
    con.register("estimates", table)
    summary = summary_of(table)
    found = {
        part: con.execute(load_sql(sql)).arrow().read_all().to_pylist()
        for part, sql in report_queries({"estimates": table.column_names}).items()
    }
    return ReportInputs(
        summary=summary,
        contrasts=contrasts_table(result) if contrasts else None,
        parts={**found, **parts},
        columns={"estimates": table.column_names},
    )


def test_a_hostile_mechanism_name_is_escaped_everywhere():
    study = "<iframe>regime</iframe>"  # a study (regime) name is a lake value too
    inputs = inputs_for(
        [records(HOSTILE, EXECUTED), records("plain", EXECUTED, proposed=EXECUTED)],
        contrasts=[(HOSTILE, "plain")],
        study=study,
        mechanisms=[{"mechanism": HOSTILE, "source": "file", "sources": 1, "images": 8}],
    )
    doc = build_report(inputs)
    page, md = html_report(doc), markdown_report(doc)
    assert "<script" not in page and "<iframe" not in page
    assert not re.search(r"(?<!\\)<(script|iframe)", md)  # every '<' of a value backslash-escaped
    assert "&lt;script&gt;" in page and "&lt;iframe&gt;" in page
    assert "\\<script>" in md and "\\<iframe>" in md and "&lt;" not in md  # Markdown escapes, no entities
    assert_self_contained(page)
    paragraph = page.split(f"<strong>{html.escape(HOSTILE)}</strong>", 1)[1]  # its paragraph, in bold, escaped
    assert paragraph.startswith(" (&lt;iframe&gt;regime&lt;/iframe&gt;;")
    assert f"<td class=text>{html.escape(HOSTILE)}</td>" in page  # and in the tables
    assert "**\\<script>alert('x')\\</script> & \\$a\\$** (" in md  # its paragraph, escaped
    assert doc.images()["forest_plot.png"][:4] == b"\x89PNG"  # '$' in a label does not start mathtext


def test_the_headline_flag_of_the_contrasts_is_the_adjusted_one():
    from autheval.reporting.report.sections_study import CONTRAST_FLAG

    inputs = inputs_for([records("a", EXECUTED), records("b", EXECUTED, proposed=EXECUTED)], contrasts=[("a", "b")])
    rows = inputs.contrasts.to_pylist()
    # a family of two where the raw interval excludes zero on both rows and the adjustment keeps one
    survive = {**rows[0], "excludes_zero": True, "excludes_zero_adjusted": True, "p_adjusted": 0.01}
    lost = {**rows[1], "excludes_zero": True, "excludes_zero_adjusted": False, "p_adjusted": 0.2}
    inputs.contrasts = pa.Table.from_pylist([survive, lost], schema=inputs.contrasts.schema)
    text = section(markdown_report(inputs), SECTION_TITLES["contrasts"])
    assert "**1 of 2 paired contrasts exclude zero after the Holm adjustment**" in text
    assert "2 exclude zero on the raw interval, 1 of which do not survive the adjustment" in text
    assert text.count("Holm p = ") == 1 and "Holm p = 0.0100" in text  # only the surviving row is told
    header = next(line for line in text.splitlines() if line.startswith("| contrast"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    flags = [
        line.split("|")[1 + cells.index(CONTRAST_FLAG)].strip()
        for line in text.splitlines()
        if line.startswith("| a minus b")
    ]
    assert flags == ["yes", "no"]


def test_a_role_separated_record_says_what_is_not_recoverable_and_why():
    inputs = inputs_for([records("logged", EXECUTED, local=False)])
    md = markdown_report(inputs)
    paragraph = section(md, SECTION_TITLES["summary"]).split("**logged**", 1)[1].split("\n\n")[0]
    assert "role-separated record: supports p and J only, not J_auth, delta or Delta" in paragraph
    assert "The review changed the proposal on p = 37.5% of images" in paragraph
    for metric in ("J_auth", "delta", "Delta"):
        assert f"{metric} not recoverable (utility_proposed_local not supplied)" in paragraph
    assert "Over all images, Delta" not in paragraph  # no number where the record cannot support one
    decomposition = section(md, SECTION_TITLES["decomposition"])
    row = next(line for line in decomposition.splitlines() if line.startswith("| logged | image-weighted"))
    assert row.count("not recoverable") == 3
    levels = section(md, SECTION_TITLES["levels"])
    assert (
        "| logged | role-separated |" in levels
        and "Delta: not recoverable (utility_proposed_local not supplied)" in levels
    )


def test_a_proposal_only_record_supports_nothing_about_authority():
    inputs = inputs_for([records("proposals", [None] * 8, local=False)])
    paragraph = (
        section(markdown_report(inputs), SECTION_TITLES["summary"]).split("**proposals**", 1)[1].split("\n\n")[0]
    )
    assert "proposal-only record: supports none of p, delta and Delta" in paragraph
    assert "p not recoverable (executed_action not supplied (proposal-only record))" in paragraph
    assert "changed the proposal on" not in paragraph


def test_tiny_model_mechanisms_are_said_to_be_random_models():
    tiny = dict(
        mechanisms=[
            {"mechanism": "sharp", "source": "file", "sources": 1, "images": 8},
            {"mechanism": "VLM readout", "source": "model", "sources": 1, "images": 8},
        ],
        vlm_models=[{"model": "tiny-gemma3", "revision": "4ba3", "images": 8, "prompts": 1}],
        probe_models=[{"model": "tiny-clip-vision@d70d3ea66e17938b", "images": 8}],
    )
    head = markdown_report(inputs_for([records("VLM readout", EXECUTED)], **tiny)).split("\n## ")[0]
    assert (
        "The model mechanisms (VLM readout) come from tiny random models (tiny-gemma3, tiny-clip-vision) run on "
        "the real code path"
    ) in head
    real = {
        **tiny,
        "vlm_models": [{"model": "medgemma-4b", "revision": "9185", "images": 8, "prompts": 1}],
        "probe_models": [],
    }
    assert "Tiny models" not in markdown_report(inputs_for([records("VLM readout", EXECUTED)], **real))


def test_the_trend_section_shows_every_pool_and_period_and_its_plot():
    trend = [
        dict(
            period=period,
            pool=pool,
            unit="image_weighted",
            metric=metric,
            estimate=value,
            ci_lower=lo,
            ci_upper=hi,
            n=40,
            n_clusters=20,
            available=value is not None,
            status="estimated" if value is not None else "not_recoverable",
            reason=None if value is not None else "utility_proposed_local not supplied",
        )
        for pool in ("full_counterfactual", "role_separated")
        for period in ("all", "2026-01")
        for metric, value, lo, hi in (
            ("intervention_rate", 0.25, 0.1, 0.4),
            ("Delta_authority", 0.3 if pool == "full_counterfactual" else None, 0.1, 0.5),
        )
    ]
    doc = build_report(inputs_for([records("a", EXECUTED)], trend=trend))
    text = section(markdown_report(doc), SECTION_TITLES["trend"])
    assert "| role_separated | 2026-01 | image-weighted | Delta | not recoverable |" in text
    assert "| full_counterfactual | all | image-weighted | p | 25.0% [10.0%, 40.0%] |" in text
    assert "![the authority gap per period](report_trend.png)" in text
    assert set(doc.images()) == {"forest_plot.png", "report_trend.png"}


def test_an_older_caller_gets_the_report_from_the_summary_alone():
    inputs = inputs_for([records("a", EXECUTED)])
    md = markdown_report(inputs.summary, None, "a provenance line")
    assert "a provenance line" in md and "**a** (" in md
    assert_every_section(md, html_report(inputs.summary, None, "a provenance line"))


# --- the plots ---------------------------------------------------------------------------------------


def test_trend_plot_puts_every_pool_to_date_first():
    from autheval.reporting.report.plots import trend_plot_rows

    periods = [
        "2026-01 (role_separated)",
        "all (role_separated)",
        "2026-01 (full_counterfactual)",
        "all (full_counterfactual)",
        "2025-12 (full_counterfactual)",
    ]
    trend = pa.table(
        {"period": periods, "metric": ["Delta_authority"] * 5, "unit": ["image_weighted"] * 5, "estimate": [0.1] * 5}
    )
    ordered = [r["period"] for r in trend_plot_rows(trend)]
    assert ordered == [
        "all (full_counterfactual)",
        "all (role_separated)",
        "2025-12 (full_counterfactual)",
        "2026-01 (full_counterfactual)",
        "2026-01 (role_separated)",
    ]


def test_the_forest_plot_leaves_many_contrasts_to_the_table():
    from autheval.reporting.report.plots import MAX_PLOTTED_CONTRAST_ROWS, forest_plot_png

    summary = pa.table(
        {
            "study": ["s"],
            "analysis": ["a"],
            **{
                f"Delta_authority_{k}{part}": [0.1]
                for k in ("image", "cluster")
                for part in ("", "_ci_lower", "_ci_upper")
            },
        }
    )

    def contrasts(n):
        return pa.table(
            {
                "contrast": [f"c{i}" for i in range(n)],
                "unit": ["image_weighted"] * n,
                "difference": [0.1] * n,
                "ci_lower": [0.0] * n,
                "ci_upper": [0.2] * n,
            }
        )

    few = forest_plot_png(summary, contrasts(MAX_PLOTTED_CONTRAST_ROWS))
    many = forest_plot_png(summary, contrasts(MAX_PLOTTED_CONTRAST_ROWS + 1))
    assert len(many) < len(few)  # the plot of many contrasts holds only the gaps
    assert many == forest_plot_png(summary, None)


def test_the_forest_plot_has_a_panel_per_group_with_its_contrasts():
    from autheval.reporting.report.plots import _forest_groups

    summary = pa.table(
        {"study": ["regimes", "regimes", "mechanisms", "mechanisms"], "analysis": ["mixed", "safety_floor", "A", "B"]}
    )
    contrasts = pa.table(
        {
            "contrast": ["A minus B", "x minus y"],
            "unit": ["image_weighted"] * 2,
            "family": ["mechanisms / image_weighted", "regimes / image_weighted"],
        }
    )
    groups = [
        (g, [r["analysis"] for r in s], [c["contrast"] for c in c_]) for g, s, c_ in _forest_groups(summary, contrasts)
    ]
    assert groups == [("regimes", ["mixed", "safety_floor"], ["x minus y"]), ("mechanisms", ["A", "B"], ["A minus B"])]


def test_every_report_query_names_a_sql_file():
    from autheval.reporting.report.queries import REPORT_QUERIES
    from warehouse.sql import load_sql

    for _, sql, _ in REPORT_QUERIES:
        assert Path(__file__).parent.parent.joinpath("sql", f"{sql}.sql").exists(), sql
        load_sql(sql)


# --- monitoring a deployment (issue 18 item 8) -----------------------------------------------------


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """A simulated deployment (2 sites x 8 months; from month 3 site-2 runs model-2, 0.5 points worse than
    model-1; site-1's case mix moves to high risk from month 5), landed and monitored under the default
    protocol."""
    from autheval.monitoring.deployment_sim import DeploymentModel, parse_drift, write_deployment
    from autheval.monitoring.landing import read_landed
    from autheval.monitoring.monitor import monitor_table
    from autheval.monitoring.protocol import load_protocol

    drifts = tuple(
        parse_drift(spec, 2, 8)
        for spec in ("site-2:proposer_quality:-0.5:from=3:version=model-2", "site-1:case_mix:0.6:from=5")
    )
    paths = write_deployment(
        DeploymentModel(sites=2, months=8, clusters_per_month=60, drifts=drifts), tmp_path_factory.mktemp("deployment")
    )
    landed = pa.concat_tables([read_landed(path)[1] for path in paths], promote_options="default")
    with pytest.warns(Warning):  # few replicates for the fixed-sample interval: noisy ends
        return monitor_table(landed, load_protocol(None), reps=100)


def monitoring_inputs(monitor: pa.Table, case_mix: pa.Table) -> ReportInputs:
    """ReportInputs as the report asset makes them from a lake's monitor tables (and a study's estimates)."""
    from warehouse.sql import connect, load_sql

    inputs = inputs_for([records("a", EXECUTED)])
    con = connect()
    con.register("monitor", monitor)
    con.register("monitor_case_mix", case_mix)
    columns = {"monitor": monitor.column_names, "monitor_case_mix": case_mix.column_names}
    inputs.parts.update(
        {
            part: con.execute(load_sql(sql)).arrow().read_all().to_pylist()
            for part, sql in report_queries(columns).items()
        }
    )
    inputs.columns.update(columns)
    return inputs


def test_the_monitoring_section_shows_the_status_the_alerts_the_case_mix_and_each_site(monitored):
    doc = build_report(monitoring_inputs(monitored.table, monitored.case_mix))
    text = section(markdown_report(doc), SECTION_TITLES["monitoring"])
    alerts = text.split("### Alerts\n", 1)[1].split("\n### ", 1)[0]
    alerting = {
        tuple(c.strip() for c in line.strip("|").split("|")[:3])
        for line in alerts.splitlines()
        if line.startswith(("| site-", "| all"))
    }
    # the planted drift alerts at its site (and in the pool of every site), nowhere else
    assert alerting == {
        ("site-2", "model-2", "Delta (cluster-equal)"),
        ("site-2", "all", "Delta (cluster-equal)"),
        ("all", "all", "Delta (cluster-equal)"),
    }
    assert f"**{len(alerting)} series alert**" in alerts and "| 2026-0" in alerts  # since when
    status = text.split("### Status at the latest look\n", 1)[1].split("\n### ", 1)[0]
    latest = [line for line in status.splitlines() if line.startswith(("| site-", "| all"))]
    assert len(latest) == len(
        {(r["site"], r["model_version"], r["metric"], r["unit"]) for r in monitored.table.to_pylist()}
    )  # one row per series: its latest look
    assert all("| 2026-08 | 8 |" in line for line in latest if "model-1" in line and "site-1" in line)
    assert "| site-2 | model-1 | Delta (cluster-equal) | [-0.1, inf] | 2026-02 | 2 |" in status  # its last month
    assert "| site-2 | model-2 | Delta (cluster-equal) | [-0.1, inf] | 2026-08 | 6 |" in status
    assert "site-1 | model-1 | p (image-weighted) | [0.05, 0.6]" in status
    shifts = text.split("### Case-mix shifts\n", 1)[1].split("\n*Every", 1)[0]
    since = re.search(r"\| site-1 \| risk_stratum \| 2026-08 \| (2026-0[0-9]) \|", shifts)
    assert since and "2026-05" <= since.group(1) <= "2026-07", shifts  # found after it was planted, never before
    found = re.search(r"\| site-1 \| risk_stratum .* high ([0-9.]+)% to ([0-9.]+)%", shifts)
    before, after = map(float, found.groups())
    assert after > before + 20  # the planted move to high risk, in the shares
    assert "![each site's confidence sequence" in text and doc.images()["report_monitor.png"][:4] == b"\x89PNG"


def test_the_monitoring_section_says_what_to_do_before_anything_has_landed(monitored):
    from autheval.monitoring.monitor import empty_case_mix, empty_monitor

    empty = section(
        markdown_report(build_report(monitoring_inputs(empty_monitor(), empty_case_mix()))),
        SECTION_TITLES["monitoring"],
    )
    assert "The monitor table has no rows: no landed log yet." in empty and "autheval monitor run --lake DIR" in empty
    absent = section(markdown_report(build_report(inputs_for([records("a", EXECUTED)]))), SECTION_TITLES["monitoring"])
    assert "This lake has no monitor table." in absent and "report_monitor.png" not in absent


def png_size(png: bytes) -> tuple[int, int]:
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_trend_png_is_one_panel_per_site_with_the_monitor_and_the_old_plot_without(monitored):
    from autheval.reporting.report.plots import monitor_plot_rows, trend_plot_png

    trend = pa.table(
        {
            "period": ["all", "2026-01"],
            "pool": ["full_counterfactual"] * 2,
            "metric": ["Delta_authority"] * 2,
            "unit": ["image_weighted"] * 2,
            "estimate": [0.1, 0.2],
            "ci_lower": [0.0, 0.1],
            "ci_upper": [0.2, 0.3],
        }
    )
    old = trend_plot_png(trend)
    assert trend_plot_png(trend, None) == old  # callers without a monitor get the plot they had
    from autheval.monitoring.monitor import empty_monitor

    assert trend_plot_png(trend, empty_monitor()) == old  # nothing monitored yet: the trend's plot
    panels = trend_plot_png(trend, monitored.table)
    one_site = trend_plot_png(trend, monitored.table.filter(pa.compute.equal(monitored.table.column("site"), "site-1")))
    width, height = png_size(panels)
    assert width == png_size(one_site)[0] and height > 2.5 * png_size(one_site)[1]  # a row of panels per site
    series = monitor_plot_rows(monitored.table)  # each site x model version, the site over its versions, every site
    last = [(r["site"], r["model_version"]) for r in series if r["look"] == 8 and r["metric"] == "Delta_authority"]
    assert last == [("site-1", "model-1"), ("site-1", "all"), ("site-2", "all"), ("all", "all")]  # model-2: 6 looks
    # the plotted sequence is the running intersection (docs/monitoring.md): it only ever narrows
    by_series: dict = {}
    for r in sorted(series, key=lambda r: r["look"]):
        by_series.setdefault((r["site"], r["model_version"], r["metric"], r["unit"]), []).append(r)
    for rows in by_series.values():
        known = [r for r in rows if r["cs_lower"] is not None and r["cs_upper"] is not None]
        assert known and all(r["ci_lower"] is not None for r in rows if r["look"] > 1)
        assert all(b["cs_lower"] >= a["cs_lower"] and b["cs_upper"] <= a["cs_upper"] for a, b in zip(known, known[1:]))


def test_the_monitoring_report_renders_in_headless_chromium(monitored, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    page = tmp_path / "report.html"
    page.write_text(html_report(build_report(monitoring_inputs(monitored.table, monitored.case_mix))))
    with tempfile.TemporaryDirectory() as profile:
        dump = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    dom = Elements()
    dom.feed(dump)
    assert dom.text["h2"] == list(SECTION_TITLES.values())
    assert {"Alerts", "Status at the latest look", "Case mix", "Case-mix shifts"} <= set(dom.text["h3"])
    assert dom.count["img"] == 2 and "script" not in dom.count  # the forest plot and the monitor's panels
