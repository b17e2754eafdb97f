"""What was done about an alert, recorded in the lake (issue 28, item 2.1): `autheval monitor ack` appends a
row to the append-only monitor_acknowledgements table as a snapshot of its own; every bad request is one
line, exit 2, and the lake keeps what it had; `monitor status` and the report name each alert by its id
with what was done about it. A real lake: a simulated deployment's logs landed and monitored under a
protocol whose bound the deployment breaks (site-1's override: more clusters before a decision)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from autheval.monitoring.acknowledgements import ACKS_TABLE, MAX_BY_CHARS, MAX_NOTE_CHARS, known_alerts
from autheval.monitoring.monitor import MONITOR_SCHEMA, alerts
from tests.conftest import land_and_monitor
from warehouse.lake import Lake
from warehouse.snapshots import current_number, read_committed, snapshot_numbers

PROTOCOL = """\
version: ack-test-1
alpha: 0.05
horizon_clusters: 500
min_clusters: 30
multiplicity: holm
family_size: 40
sites:
  site-1: {min_clusters: 50}
rules:
  - {metric: intervention_rate, unit: image_weighted, upper: 0.2}
  - {metric: intervention_rate, unit: cluster_equal, lower: 0.01}
"""


def alerting_lake(root: Path) -> Path:
    """2 sites x 3 months of a simulated deployment, monitored under PROTOCOL: the image-weighted
    intervention rate (about 0.3) breaks its upper bound 0.2 at site-1 and pooled."""
    from autheval.monitoring.deployment_sim import DeploymentModel

    protocol = root / "protocol.yaml"
    root.mkdir(parents=True, exist_ok=True)
    protocol.write_text(PROTOCOL)
    lake, code = land_and_monitor(root, DeploymentModel(sites=2, months=3, clusters_per_month=60), protocol=protocol)
    assert code == 3  # something alerts
    return lake


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return alerting_lake(tmp_path_factory.mktemp("acks"))


@pytest.fixture
def lake(built, tmp_path) -> Path:
    """A copy of the alerting lake of this test's own."""
    return Path(shutil.copytree(built, tmp_path / "lake", symlinks=True))


def ack(lake: Path, alert: str, by: str = "Dr A. Ngata", action: str = "acknowledged", note: str = "seen; on it"):
    from autheval.cli.main import main

    return main(
        ["monitor", "ack", "--lake", str(lake), "--alert", alert, "--by", by, "--action", action, "--note", note]
    )


def alert_of(lake: Path, site: str, version: str) -> str:
    [found] = [a for a in alerts(Lake(lake).read("monitor")) if (a["site"], a["model_version"]) == (site, version)]
    return found["alert_id"]


def lake_state(lake: Path) -> tuple:
    store = Lake(lake)
    rows = store.read(ACKS_TABLE).to_pylist() if store.has_table(ACKS_TABLE) else None
    return current_number(store.location), snapshot_numbers(store.location), rows


# --- the record --------------------------------------------------------------------------------------


def test_an_ack_appends_one_row_committed_as_a_snapshot_of_its_own(lake, capsys):
    alert = alert_of(lake, "site-1", "model-1")
    before = current_number(Lake(lake).location)
    assert ack(lake, alert) == 0
    said = capsys.readouterr().out
    store = Lake(lake)
    after = current_number(store.location)
    [row] = store.read(ACKS_TABLE).to_pylist()
    assert after == before + 1 and f"snapshot {after}" in said and alert in said
    assert row["alert_id"] == alert and (row["site"], row["model_version"]) == ("site-1", "model-1")
    assert (row["metric"], row["unit"], row["lower"], row["upper"]) == (
        "intervention_rate",
        "image_weighted",
        None,
        0.2,
    )
    assert (row["first_look"], row["first_period"]) == (3, "2026-03")  # the look the alert is about
    assert (row["action"], row["recorded_by"], row["note"]) == ("acknowledged", "Dr A. Ngata", "seen; on it")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["recorded_at"])
    manifest, previous = read_committed(store.location, after), read_committed(store.location, before)
    assert row["recorded_run"] == manifest.run_id and row["recorded_run"].startswith("ack-")
    assert row["read_snapshot"] == before
    changed = {name for name in manifest.tables if manifest.tables[name] != previous.tables.get(name)}
    assert changed == {ACKS_TABLE}  # nothing else of the lake is touched


def test_a_later_ack_adds_a_row_and_earlier_rows_stay_as_written_through_monitor_runs(lake, built):
    from dagster_project.monitor_run import monitor_run

    alert = alert_of(lake, "all", "all")
    assert ack(lake, alert) == 0
    first = Lake(lake).read(ACKS_TABLE).to_pylist()
    assert ack(lake, alert, by="Safety board", action="reviewed", note="threshold kept; vendor asked") == 0
    assert ack(lake, alert, action="reviewed", note="seen; on it") == 0  # same person and note, another action
    rows = Lake(lake).read(ACKS_TABLE).to_pylist()
    assert rows[:1] == first and [r["action"] for r in rows] == ["acknowledged", "reviewed", "reviewed"]
    assert monitor_run(lake, built.parent / "protocol.yaml", out=lambda line: None, settle_seconds=0) == 3
    assert Lake(lake).read(ACKS_TABLE).to_pylist() == rows  # a monitor run carries the record forward
    other = alert_of(lake, "site-1", "all")
    assert ack(lake, other) == 0
    assert Lake(lake).read(ACKS_TABLE).to_pylist()[:3] == rows


def test_monitor_status_names_each_alert_in_force_with_its_id_and_what_was_done(lake, capsys):
    from autheval.cli.main import main

    pooled, site = alert_of(lake, "all", "all"), alert_of(lake, "site-1", "model-1")
    assert ack(lake, pooled, note="looked at the cases") == 0
    capsys.readouterr()
    assert main(["monitor", "status", "--lake", str(lake)]) == 3
    lines = capsys.readouterr().out.splitlines()
    [acked] = [line for line in lines if line.startswith(f"alert {pooled} ")]
    [open_] = [line for line in lines if line.startswith(f"alert {site} ")]
    assert "all / all / landed: intervention_rate (image_weighted) since 2026-03 (look 3)" in acked
    assert "acknowledged by Dr A. Ngata" in acked and "looked at the cases" in acked
    assert "site-1 / model-1" in open_ and "not acknowledged" in open_ and "monitor ack" in open_


def test_the_report_lists_every_alert_with_site_version_and_its_acknowledgements(lake):
    pooled, site = alert_of(lake, "all", "all"), alert_of(lake, "site-1", "model-1")
    assert ack(lake, pooled, note="looked at the cases") == 0
    assert ack(lake, pooled, by="Board", action="reviewed", note="bound kept") == 0  # the report is rebuilt with it
    md = (lake / "reports" / "report.md").read_text()
    record = md.split("### Alerts and what was done about them\n", 1)[1].split("\n### ", 1)[0]
    [pooled_row] = [line for line in record.splitlines() if line.startswith(f"| {pooled} |")]
    [site_row] = [line for line in record.splitlines() if line.startswith(f"| {site} |")]
    assert pooled_row.startswith(f"| {pooled} | all | all | p (image-weighted) | [-inf, 0.2] | look 3 (2026-03) |")
    assert "acknowledged by Dr A. Ngata" in pooled_row and "reviewed by Board" in pooled_row
    assert pooled_row.index("acknowledged by") < pooled_row.index("reviewed by")  # in the order recorded
    assert site_row.startswith(f"| {site} | site-1 | model-1 |") and site_row.endswith(
        "| in force | not acknowledged |"
    )
    assert "3 alert(s), 2 not acknowledged" in record


# --- refusals: one line, exit 2, the lake as it was --------------------------------------------------


@pytest.mark.parametrize(
    "change, said",
    [
        ({"alert": "0123456789abcdef0123"}, r"--alert: no alert 0123456789abcdef0123 in lake"),
        ({"alert": "not-an-id"}, r"--alert: 'not-an-id' is not an alert id \(20 hex digits"),
        ({"alert": "0123456789abcdef0123\n"}, r"--alert: '0123456789abcdef0123\\n' is not an alert id"),
        ({"action": "resolved"}, r"--action: 'resolved' is not an action: use acknowledged or reviewed"),
        ({"action": ""}, r"--action: '' is not an action"),
        ({"by": ""}, r"--by: must not be empty"),
        ({"by": "   "}, r"--by: must not be empty"),
        ({"by": "x" * (MAX_BY_CHARS + 1)}, rf"--by: at most {MAX_BY_CHARS} characters"),
        ({"note": ""}, r"--note: must not be empty"),
        (
            {"note": "line one\nline two"},
            r"--note: must be one line of text without control characters \(found U\+000A\)",
        ),
        ({"note": "ok\x1b[2Jcleared"}, r"--note: .*\(found U\+001B\)"),
        ({"note": "see \u202ereversed"}, r"--note: .*\(found U\+202E\)"),
        ({"by": "Dr\u2028A"}, r"--by: .*\(found U\+2028\)"),
        ({"by": "\u200b"}, r"--by: must hold visible text"),
        ({"note": "\u200b\u00ad"}, r"--note: must hold visible text"),
        (
            {"note": "y" * (MAX_NOTE_CHARS + 1)},
            rf"--note: at most {MAX_NOTE_CHARS} characters \(got {MAX_NOTE_CHARS + 1}\)",
        ),
    ],
)
def test_a_bad_request_is_one_line_exit_2_and_the_lake_keeps_what_it_had(lake, capsys, change, said):
    request = {"alert": alert_of(lake, "site-1", "model-1"), **change}
    before = lake_state(lake)
    assert ack(lake, **request) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and re.search(said, err), err
    assert lake_state(lake) == before


def test_the_same_action_by_the_same_person_with_the_same_note_again_is_refused(lake, capsys):
    alert = alert_of(lake, "site-1", "model-1")
    assert ack(lake, alert) == 0
    before = lake_state(lake)
    capsys.readouterr()
    assert ack(lake, alert, by="  Dr A. Ngata ") == 2  # the same person, as recorded (stripped)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "acknowledged by 'Dr A. Ngata' with this note is recorded already" in err
    assert lake_state(lake) == before


def test_a_name_typed_two_ways_is_one_name_so_a_repeated_ack_is_refused(lake, capsys):
    alert = alert_of(lake, "site-1", "model-1")
    assert ack(lake, alert, by="Zo\u00eb") == 0  # composed
    capsys.readouterr()
    assert ack(lake, alert, by="Zoe\u0308") == 2  # decomposed: the same name, the same note
    assert "recorded already" in capsys.readouterr().err
    assert [r["recorded_by"] for r in Lake(lake).read(ACKS_TABLE).to_pylist()][-1] == "Zo\u00eb"


def test_a_lake_without_a_monitor_table_is_refused_in_one_line(tmp_path, capsys):
    root = tmp_path / "lake"
    Lake(root).write("trend", pa.table({"period": ["2026-01"]}))
    before = lake_state(root)
    assert ack(root, "0123456789abcdef0123") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the lake has no 'monitor' table" in err
    assert lake_state(root) == before
    assert ack(tmp_path / "nowhere", "0123456789abcdef0123") == 2
    assert "no such lake folder" in capsys.readouterr().err


# --- which alerts exist ------------------------------------------------------------------------------


def looks(statuses: list[str], site: str = "site-9") -> pa.Table:
    """One series' looks (intervention_rate, image-weighted, upper 0.2) with these statuses."""
    rows = [
        {
            "site": site,
            "model_version": "v1",
            "mechanism": "landed",
            "metric": "intervention_rate",
            "unit": "image_weighted",
            "upper": 0.2,
            "period": f"2026-{i:02d}",
            "look": i,
            "status": status,
            "protocol_version": "p1",
            "protocol_sha256": "ab" * 32,
        }
        for i, status in enumerate(statuses, start=1)
    ]
    return pa.Table.from_pylist(rows, schema=MONITOR_SCHEMA)


def test_an_alert_is_each_run_of_alerting_looks_in_force_or_ended_and_the_decision_records_count(tmp_path):
    from autheval.monitoring.acknowledgements import alert_episodes

    table = looks(["pass", "alert", "alert", "pass", "alert"])
    episodes = alert_episodes(table)
    assert [(e["first_look"], e["last_look"], e["in_force"]) for e in episodes] == [(2, 3, False), (5, 5, True)]
    assert [a["alert_id"] for a in alerts(table)] == [episodes[1]["alert_id"]]  # the notifier's id, in force
    store = Lake(tmp_path / "lake")
    store.write("monitor", looks(["pass", "pass", "pass"]))  # later data recomputed the alert away...
    store.write("monitor_decisions", looks(["pass", "alert", "alert"], site="site-9"))  # ...as first decided
    found = known_alerts(store)
    assert list(found) == [episodes[0]["alert_id"]] and found[episodes[0]["alert_id"]]["first_period"] == "2026-02"
