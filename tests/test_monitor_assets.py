"""The monitor in the lake: the `monitor` asset and its tables, the `monitor_has_no_alerts` check (red for
every alert), the alert sensor that notifies once per alert (an HTTP server on 127.0.0.1, a command;
across restarts), the schedule from configuration, and `monitor_run` (land what waits, run the
recurring job in-process, exit 0 / 3 / 1). Everything in-process on temporary lakes."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from dagster import AssetCheckSeverity, DagsterEventType, build_sensor_context, materialize

from assets.monitor import alerts_check, monitor_alert_sensor
from assets.resources import LakeResource, NotifierResource, ProtocolResource
from autheval.monitoring.deployment_sim import DeploymentModel, parse_drift, write_deployment
from autheval.monitoring.monitor import CASE_MIX_SCHEMA, MONITOR_SCHEMA, alerts
from dagster_project.definitions import build_definitions, project_instance, study_assets
from dagster_project.demo import QUIET
from warehouse.lake import Lake

PAYLOAD_NAMES = {
    "alert_id",
    "site",
    "model_version",
    "mechanism",
    "metric",
    "unit",
    "lower",
    "upper",
    "cs_lower",
    "cs_upper",
    "period",
    "first_period",
    "protocol_version",
    "protocol_sha256",
}


def look(site, metric, period, n, status, cs, bounds=(0.05, 0.60), unit="image_weighted"):
    return {
        "site": site,
        "model_version": "model-1",
        "mechanism": "landed",
        "metric": metric,
        "unit": unit,
        "period": period,
        "look": n,
        "n_clusters": 40 * n,
        "estimate": sum(cs) / 2,
        "cs_lower": cs[0],
        "cs_upper": cs[1],
        "lower": bounds[0],
        "upper": bounds[1],
        "status": status,
        "reason": f"{status} here",
        "protocol_version": "service-protocol-1",
        "protocol_sha256": "ab" * 32,
    }


def monitor_of(rows: list[dict]) -> pa.Table:
    """A monitor table made by hand, in its contract's columns (autheval.monitoring.monitor.MONITOR_SCHEMA)."""
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in MONITOR_SCHEMA} for r in rows], schema=MONITOR_SCHEMA)


RATE, GAP = "intervention_rate", "Delta_authority"
GAP_BOUNDS = (-0.10, None)
FIRST = [  # site-1 alerts at its latest look only; site-2 at both; site-3 is not decided yet
    look("site-1", RATE, "2026-01", 1, "pass", (0.20, 0.50)),
    look("site-1", RATE, "2026-02", 2, "alert", (0.62, 0.90)),
    look("site-2", GAP, "2026-01", 1, "alert", (-0.60, -0.20), GAP_BOUNDS, "cluster_equal"),
    look("site-2", GAP, "2026-02", 2, "alert", (-0.50, -0.25), GAP_BOUNDS, "cluster_equal"),
    look("site-3", RATE, "2026-01", 1, "insufficient", (0.01, 0.70)),
    look("site-3", RATE, "2026-02", 2, "insufficient", (0.30, 0.70)),
]
# a month later: both alerts go on (the same alerts), site-3 alerts for the first time
LATER = FIRST + [
    look("site-1", RATE, "2026-03", 3, "alert", (0.63, 0.85)),
    look("site-2", GAP, "2026-03", 3, "alert", (-0.45, -0.28), GAP_BOUNDS, "cluster_equal"),
    look("site-3", RATE, "2026-03", 3, "alert", (0.61, 0.80)),
]
QUIET_LOOKS = [row for row in FIRST if row["status"] != "alert"]


# --- the check -------------------------------------------------------------------------------------


def test_the_check_fails_naming_every_alert_and_passes_without():
    red = alerts_check(alerts(monitor_of(FIRST)))
    assert red.passed is False and red.severity == AssetCheckSeverity.ERROR
    assert red.metadata["alert_count"].value == 2
    assert "site-1 / model-1 / landed: intervention_rate (image_weighted)" in red.description
    assert "[0.6200, 0.9000] outside [0.05, 0.6] at 2026-02" in red.description
    assert "site-2 / model-1 / landed: Delta_authority (cluster_equal)" in red.description
    assert "outside [-0.1, open] at 2026-02 (alerting since 2026-01)" in red.description
    assert "site-3" not in red.description  # insufficient is no alert
    green = alerts_check(alerts(monitor_of(QUIET_LOOKS)))
    assert green.passed is True and green.metadata["alert_count"].value == 0
    assert alerts_check(alerts(monitor_of([]))).passed is True


def simulated_lake(root: Path, **model) -> Path:
    """A lake whose landing folder holds the monthly logs of a simulated deployment."""
    drifts = tuple(parse_drift(spec, model.get("sites", 1), model.get("months", 2)) for spec in model.pop("drift", ()))
    write_deployment(DeploymentModel(**{"sites": 1, "months": 2, **model}, drifts=drifts), root / "landing")
    (root / "landing" / "deployment.json").unlink()  # the simulator's truth is not a log (and is ignored anyway)
    return root


def land_all(root: Path, instance):
    """Land every waiting log as monitor_run does (two looks, one landing run per file), without the
    recurring job; returns the lake's definitions."""
    from autheval.monitoring.landing import watch
    from dagster_project.monitor_run import _land_run

    defs = build_definitions(str(root))
    store = Lake(root)
    tick = watch(root / "landing", store, watch(root / "landing", store, None).cursor)
    assert tick.requests
    for key, name, _ in tick.requests:
        assert _land_run(defs, instance, key, name, lambda line: None)[0]
    return defs


def check_evaluations(instance, run_id: str) -> list:
    return [
        r.event_log_entry.dagster_event.event_specific_data
        for r in instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    ]


@pytest.mark.parametrize("rate, red", [(0.90, True), (0.30, False)], ids=["over-the-bound", "within"])
def test_the_monitor_asset_writes_its_tables_and_the_check_is_red_on_an_alert(tmp_path, rate, red):
    root = simulated_lake(tmp_path / "lake", intervention_rate=rate)
    instance = project_instance()
    defs = land_all(root, instance)
    resources = {**defs.resources, "protocol": ProtocolResource(bootstrap_reps=1000)}
    result = materialize(
        study_assets(),
        selection=["monitor", "monitor_case_mix"],
        resources=resources,
        instance=instance,
        run_config=QUIET,
    )
    assert result.success
    [evaluation] = check_evaluations(instance, result.run_id)
    assert evaluation.check_name == "monitor_has_no_alerts" and evaluation.passed is (not red)
    assert evaluation.severity == AssetCheckSeverity.ERROR
    store = Lake(root)
    monitor = store.read("monitor")
    assert monitor.schema.names[:6] == ["site", "model_version", "mechanism", "metric", "unit", "period"]
    latest = {(r["site"], r["model_version"], r["metric"]): r["status"] for r in monitor.to_pylist() if r["look"] == 2}
    assert latest[("site-1", "model-1", RATE)] == ("alert" if red else "pass")
    assert (evaluation.metadata["alert_count"].value > 0) is red
    assert store.read("monitor_case_mix").num_rows > 0


def test_the_monitor_and_trend_assets_read_the_landed_files_where_they_lie(tmp_path, monkeypatch):
    """Neither asset holds the landed table (its rows would be most of a monthly run's memory): with the
    lake's reads of it refused, both materialize, and the monitor decides as it does on the rows held."""
    import autheval.monitoring.landing as landing
    from autheval.monitoring.monitor import monitor_table
    from autheval.monitoring.protocol import load_protocol

    root = simulated_lake(tmp_path / "lake", sites=2, months=3)
    instance = project_instance()
    defs = land_all(root, instance)
    held = landing.read_landed_table(Lake(root))
    lake_read = Lake.read

    def refused(*args, **kwargs):
        raise AssertionError("the landed table was read into memory")

    def read(self, name):
        if name == landing.LANDED_TABLE:
            refused()
        return lake_read(self, name)

    monkeypatch.setattr(landing, "read_landed_table", refused)
    monkeypatch.setattr(Lake, "read", read)
    resources = {**defs.resources, "protocol": ProtocolResource(bootstrap_reps=0)}
    result = materialize(
        study_assets(),
        selection=["trend", "monitor", "monitor_case_mix"],
        resources=resources,
        instance=instance,
        run_config=QUIET,
    )
    assert result.success
    columns = ["site", "model_version", "metric", "unit", "period", "look", "estimate", "cs_lower", "status"]
    served = Lake(root).read("monitor").select(columns)
    assert served.num_rows > 0 and served.equals(monitor_table(held, load_protocol(None), reps=0).table.select(columns))


# --- notifications ---------------------------------------------------------------------------------


class Receiver(http.server.BaseHTTPRequestHandler):
    """Records each POSTed JSON body; answers with the server's `answer` status."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(self.server.answer)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.received, server.answer = [], 200
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class Sensor:
    """The alert sensor on one lake with one notifier, its cursor kept as the daemon keeps it;
    `restart()` forgets the cursor and the instance, as a new deployment of the UI would."""

    def __init__(self, root: Path, notifier: NotifierResource):
        self.root, self.notifier = root, notifier
        self.restart()

    def restart(self):
        self.instance, self.cursor = project_instance(), None

    def tick(self) -> str:
        with build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            resources={"lake": LakeResource(root=str(self.root)), "notifier": self.notifier},
        ) as context:
            result = monitor_alert_sensor(context)
        self.cursor = result.cursor if result.cursor is not None else self.cursor
        assert not result.run_requests
        return result.skip_reason.skip_message


def commit_monitor(root: Path, rows: list[dict]) -> None:
    Lake(root).write("monitor", monitor_of(rows))  # outside a run: committed at once, as a run's commit would


def test_the_sensor_posts_once_per_alert_also_after_a_restart(tmp_path, receiver):
    root = tmp_path / "lake"
    sensor = Sensor(root, NotifierResource(url=f"http://127.0.0.1:{receiver.server_port}/alerts"))
    assert "no monitor table" in sensor.tick() and receiver.received == []
    commit_monitor(root, FIRST)
    assert sensor.tick().startswith("2 alert(s) sent")
    assert [t for t, _ in receiver.received] == ["application/json"] * 2
    posted = {(p["site"], p["metric"]): p for _, p in receiver.received}
    assert set(posted) == {("site-1", RATE), ("site-2", GAP)}
    rate = posted[("site-1", RATE)]
    assert PAYLOAD_NAMES <= set(rate)
    assert (rate["model_version"], rate["mechanism"], rate["unit"]) == ("model-1", "landed", "image_weighted")
    assert (rate["lower"], rate["upper"], rate["cs_lower"], rate["cs_upper"]) == (0.05, 0.60, 0.62, 0.90)
    assert (rate["period"], rate["first_period"], rate["protocol_version"]) == (
        "2026-02",
        "2026-02",
        "service-protocol-1",
    )
    assert posted[("site-2", GAP)]["first_period"] == "2026-01" and posted[("site-2", GAP)]["upper"] is None
    assert "no new monitor table" in sensor.tick() and len(receiver.received) == 2
    sensor.restart()  # no cursor, a new instance: the ids sent are the lake's
    assert sensor.tick().startswith("0 alert(s) sent, 2 sent before") and len(receiver.received) == 2
    notified = json.loads((root / "monitor" / "notified.json").read_text())["notified"]
    assert set(notified) == {p["alert_id"] for _, p in receiver.received}
    commit_monitor(root, LATER)  # the two alerts go on, site-3 alerts for the first time
    assert sensor.tick().startswith("1 alert(s) sent, 2 sent before")
    assert [(p["site"], p["period"]) for _, p in receiver.received[2:]] == [("site-3", "2026-03")]
    assert sensor.tick() == "no new monitor table since the last look" and len(receiver.received) == 3


def test_an_alert_that_could_not_be_sent_is_sent_on_a_later_tick(tmp_path, receiver):
    root = tmp_path / "lake"
    sensor = Sensor(root, NotifierResource(url=f"http://127.0.0.1:{receiver.server_port}/"))
    commit_monitor(root, FIRST)
    receiver.answer = 503
    assert sensor.tick().startswith("0 alert(s) sent, 0 sent before, 2 not sent")
    assert not (root / "monitor" / "notified.json").exists()
    receiver.answer = 200
    assert sensor.tick().startswith("2 alert(s) sent")  # the cursor stayed: tried again
    assert len({p["alert_id"] for _, p in receiver.received}) == 2 and len(receiver.received) == 4
    assert "no new monitor table" in sensor.tick()


def test_the_sensor_runs_a_declared_command_once_per_alert(tmp_path):
    root = tmp_path / "lake"
    sent = tmp_path / "sent.jsonl"
    script = tmp_path / "notify.py"
    script.write_text(
        "import json, os, sys\n"
        "alert = json.load(sys.stdin)\n"
        "assert alert['alert_id'] == os.environ['AUTHEVAL_ALERT_ID']\n"
        f"open({str(sent)!r}, 'a').write(json.dumps(alert) + '\\n')\n"
    )
    sensor = Sensor(root, NotifierResource(command=f"{sys.executable} {script}"))
    commit_monitor(root, FIRST)
    assert sensor.tick().startswith("2 alert(s) sent")
    sensor.restart()
    assert sensor.tick().startswith("0 alert(s) sent, 2 sent before")
    commit_monitor(root, LATER)
    assert sensor.tick().startswith("1 alert(s) sent")
    lines = [json.loads(line) for line in sent.read_text().splitlines()]
    assert [(a["site"], a["metric"]) for a in lines] == [("site-1", RATE), ("site-2", GAP), ("site-3", RATE)]
    assert all(PAYLOAD_NAMES <= set(a) for a in lines)


def test_a_failing_command_is_not_recorded(tmp_path):
    root = tmp_path / "lake"
    sensor = Sensor(root, NotifierResource(command=f"{sys.executable} -c \"import sys; sys.exit('mail server down')\""))
    commit_monitor(root, FIRST)
    assert sensor.tick().startswith("0 alert(s) sent, 0 sent before, 2 not sent")
    assert not (root / "monitor" / "notified.json").exists()


def test_without_a_notifier_the_sensor_sends_nothing(tmp_path):
    root = tmp_path / "lake"
    commit_monitor(root, FIRST)
    assert "no notifier declared" in Sensor(root, NotifierResource()).tick()
    assert not (root / "monitor").exists()


def test_a_notifier_is_a_command_or_a_url():
    from autheval.monitoring.notify import send

    with pytest.raises(ValueError, match="not both"):
        send({}, command="true", url="http://127.0.0.1:9/")
    with pytest.raises(ValueError, match="must start with http"):
        send({}, url="ftp://example.org/")


# --- the schedule ----------------------------------------------------------------------------------


def schedule(monkeypatch, cron=None, tz=None):
    for name, value in (("AUTHEVAL_MONITOR_CRON", cron), ("AUTHEVAL_MONITOR_TZ", tz)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    [found] = build_definitions("/nonexistent-lake").schedules
    return found


def test_the_schedule_is_monthly_utc_unless_configured(monkeypatch):
    default = schedule(monkeypatch)
    assert (default.cron_schedule, default.execution_timezone) == ("0 6 1 * *", "UTC")
    assert default.job_name == "recurring_evaluation"
    weekly = schedule(monkeypatch, "30 5 * * 1", "Europe/Paris")
    assert (weekly.cron_schedule, weekly.execution_timezone) == ("30 5 * * 1", "Europe/Paris")


@pytest.mark.parametrize("cron, tz, said", [
    ("0 6 1 *", None,
     "monitor schedule cron '0 6 1 *' ($AUTHEVAL_MONITOR_CRON): not a cron schedule; give five fields"),
    ("every month", None, "monitor schedule cron 'every month' ($AUTHEVAL_MONITOR_CRON)"),
    (None, "Mars/Olympus", "monitor schedule time zone 'Mars/Olympus' ($AUTHEVAL_MONITOR_TZ): not a time zone"),
])  # fmt: skip
def test_a_bad_schedule_setting_is_one_clear_line(monkeypatch, cron, tz, said):
    with pytest.raises(ValueError) as err:
        schedule(monkeypatch, cron, tz)
    assert str(err.value).startswith(said) and "\n" not in str(err.value)


def test_the_recurring_job_runs_trend_then_monitor_then_the_catalog():
    job = build_definitions("/nonexistent-lake").resolve_job_def("recurring_evaluation")
    assert {k.to_user_string() for k in job.asset_layer.selected_asset_keys} == {
        "trend",
        "monitor",
        "monitor_case_mix",
        "catalog",
    }


# --- monitor_run -----------------------------------------------------------------------------------


def run_monitor(root: Path, protocol: Path | None = None) -> tuple[int, list[str]]:
    from dagster_project.monitor_run import monitor_run

    lines: list[str] = []
    return monitor_run(root, protocol, out=lines.append, settle_seconds=0.2), lines


def test_monitor_run_lands_two_monthly_logs_and_runs_the_recurring_job(tmp_path):
    root = simulated_lake(tmp_path / "lake")
    (root / "landing" / "site-1_2026-03.csv.part").write_text("case_id\n")  # still being written: ignored
    code, lines = run_monitor(root)
    assert code == 0, lines
    landed = [line for line in lines if line.startswith("landed")]
    assert [line.split()[1] for line in landed] == ["site-1_2026-01.csv:", "site-1_2026-02.csv:"]
    assert all("full_counterfactual" in line for line in landed)
    status = [line for line in lines if line.startswith(("PASS", "ALERT", "INSUFFICIENT"))]
    assert status and not any(line.startswith("ALERT") for line in status)
    assert any(
        "site-1 / model-1 / landed: intervention_rate (image_weighted)" in line and "(look 2)" in line
        for line in status
    )
    store = Lake(root)
    monitor = store.read("monitor").to_pylist()
    assert {(r["period"], r["look"]) for r in monitor if r["site"] == "site-1"} == {("2026-01", 1), ("2026-02", 2)}
    trend = store.read("trend")
    assert {"2026-01", "2026-02", "all"} <= set(trend.column("period").to_pylist())
    assert sorted(p.name.split("__", 1)[1] for p in (root / "landing" / "processed").iterdir()) == [
        "site-1_2026-01.csv",
        "site-1_2026-02.csv",
    ]
    assert (root / "landing" / "site-1_2026-03.csv.part").exists()
    snapshot = store.snapshot().snapshot

    # the same files again, and a broken one: a duplicate and a rejection, each on its line; the job runs
    [processed] = (root / "landing" / "processed").glob("*__site-1_2026-01.csv")
    (root / "landing" / "copy.csv").write_bytes(processed.read_bytes())
    (root / "landing" / "broken.csv").write_text(
        "case_id,cluster_id,proposed_action,executed_action,"
        "utility_executed_local,timestamp\nx1,k1,a1,a2,abc,2026-03-01\n"
    )
    code, lines = run_monitor(root)
    assert code == 0, lines
    assert any(line.startswith("duplicate copy.csv: already landed") for line in lines), lines
    rejected = [line for line in lines if line.startswith("rejected")]
    assert len(rejected) == 1 and "broken.csv" in rejected[0] and "utility_executed_local" in rejected[0], lines
    assert not any(line.startswith("landed") for line in lines)
    assert Lake(root).snapshot().snapshot > snapshot


def test_monitor_run_exits_3_when_something_alerts(tmp_path):
    root = simulated_lake(tmp_path / "lake", intervention_rate=0.9)
    code, lines = run_monitor(root)
    assert code == 3, lines
    assert any(line.startswith("ALERT") and "site-1 / model-1 / landed: intervention_rate" in line for line in lines)


def test_monitor_run_refuses_a_bad_protocol_before_anything_lands(tmp_path):
    from autheval.errors import RecordError

    root = simulated_lake(tmp_path / "lake")
    bad = tmp_path / "protocol.yaml"
    bad.write_text("version: p-1\nhorizon_clusters: 100\nrules: []\n")
    with pytest.raises(RecordError, match="rules"):
        run_monitor(root, bad)
    assert len(list((root / "landing").glob("*.csv"))) == 2 and not (root / "landing" / "processed").exists()


def test_monitor_run_refuses_two_notifiers_before_anything_lands(tmp_path, monkeypatch):
    root = simulated_lake(tmp_path / "lake")
    monkeypatch.setenv("AUTHEVAL_NOTIFY_COMMAND", "true")
    monkeypatch.setenv("AUTHEVAL_NOTIFY_URL", "http://127.0.0.1:9/")
    with pytest.raises(ValueError, match="not both"):
        run_monitor(root)
    assert not (root / "landing" / "processed").exists()


def test_monitor_run_fails_with_1_when_the_recurring_job_fails(tmp_path, monkeypatch):
    import autheval.monitoring.monitor

    root = simulated_lake(tmp_path / "lake")

    def broken(*args, **kwargs):
        raise RuntimeError("the monitor broke")

    monkeypatch.setattr("assets.monitor.monitor_table", broken)
    code, lines = run_monitor(root)
    assert code == 1 and any(
        line.startswith("failed    the recurring job") and "the monitor broke" in line for line in lines
    ), lines
    assert autheval.monitoring.monitor.monitor_table is not broken
    assert not Lake(root).has_table("monitor")  # the failed run committed nothing


# --- before anything has landed --------------------------------------------------------------------


def test_a_demo_lake_answers_for_trend_and_monitor_before_anything_lands(tmp_path):
    from dagster_project.demo import RECURRING_STEP, run_stages
    from tests.conftest import run_cli

    root = tmp_path / "lake"
    run_stages(root, stages=(), out=lambda line: None)  # every demo runs its stages, then this step
    assert RECURRING_STEP[0] == "recurring"
    for table, named in (
        ("trend", ["period", "pool", "unit", "metric", "estimate", "ci_lower", "ci_upper"]),
        ("monitor", MONITOR_SCHEMA.names),
        ("monitor_case_mix", CASE_MIX_SCHEMA.names),
    ):
        result = run_cli("query", f"select * from {table}", "--lake", str(root), "--format", "csv")  # noqa: S608 -- table from the fixed tuple above
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert set(named) <= set(lines[0].split(",")), (table, lines[0])
        assert len(lines) == 1, table  # no rows
    code, lines = run_monitor(root)
    assert code == 0 and lines == ["no monitored looks yet: nothing has landed"], lines


# --- end to end: a simulated deployment with one planted drift --------------------------------------


def test_monitor_run_on_a_simulated_drift_alerts_at_that_site_and_nowhere_else(tmp_path):
    """`autheval synth deployment` (3 sites, 4 months; site-2's proposer 0.6 simulator units worse from
    month 2), the logs dropped into <lake>/landing/, `autheval monitor run` (exit 3) and `autheval
    monitor status` (exit 3, the same lines); the notifier, declared in the environment, hears of
    site-2 and of the pooled row that contains it, once."""
    import os
    import subprocess

    from tests.conftest import ROOT

    root = tmp_path / "lake"
    sent = tmp_path / "sent.jsonl"
    script = tmp_path / "notify.py"
    script.write_text(f"import sys\nopen({str(sent)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    env = {**os.environ, "AUTHEVAL_NOTIFY_COMMAND": f"{sys.executable} {script}"}

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "autheval", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
        )

    made = cli(
        "synth",
        "deployment",
        "--sites",
        "3",
        "--months",
        "4",
        "--clusters-per-month",
        "100",
        "--out",
        str(tmp_path / "logs"),
        "--drift",
        "site-2:proposer_quality:-0.6:from=2",
    )
    assert made.returncode == 0, made.stderr
    (root / "landing").mkdir(parents=True)
    for log in sorted((tmp_path / "logs").glob("site-*.csv")):
        log.rename(root / "landing" / log.name)
    run = cli("monitor", "run", "--lake", str(root))
    assert run.returncode == 3, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert sum(line.startswith("landed") for line in lines) == 12
    alerting = [line for line in lines if line.startswith("ALERT")]
    sites = {line.split()[1] for line in alerting}
    assert "site-2" in sites and sites <= {"site-2", "all"}, alerting  # 'all': the pooled row, site-2 in it
    for site in ("site-1", "site-3"):
        assert all(not line.startswith("ALERT") for line in lines if line.split()[1:2] == [site])
        assert any(line.split()[1:2] == [site] for line in lines if line.startswith(("PASS", "INSUFFICIENT")))
    status = cli("monitor", "status", "--lake", str(root))
    assert status.returncode == 3, status.stdout + status.stderr
    assert [line for line in status.stdout.splitlines() if line.startswith("ALERT")] == alerting
    png = (root / "reports" / "trend.png").read_bytes()  # one row of panels per site and the pooled one
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[20:24], "big") > 4 * 2.7 * 100 * 0.9
    notified = [json.loads(line) for line in sent.read_text().splitlines()]
    assert {a["site"] for a in notified} == sites and len(notified) == len(alerting)
    again = cli("monitor", "run", "--lake", str(root))  # nothing new lands, the same alerts: none sent again
    assert again.returncode == 3 and not any(line.startswith("landed") for line in again.stdout.splitlines())
    assert len(sent.read_text().splitlines()) == len(notified)


def test_monitor_run_decides_by_the_protocol_the_environment_names(tmp_path, monkeypatch):
    from autheval.monitoring.protocol import default_protocol_text

    root = simulated_lake(tmp_path / "lake")
    strict = tmp_path / "strict.yaml"
    strict.write_text(
        default_protocol_text()
        .replace("version: service-protocol-1", "version: strict-1")
        .replace("upper: 0.60", "upper: 0.10")
        .replace("family_size: 40", "family_size: 8")  # its 4 series x 2 rules, declared
    )
    monkeypatch.setenv("AUTHEVAL_PROTOCOL", str(strict))
    code, lines = run_monitor(root)
    assert code == 3, lines  # an intervention rate of about 0.3 is over this protocol's 0.1
    assert set(Lake(root).read("monitor").column("protocol_version").to_pylist()) == {"strict-1"}
    strict.write_text("version: strict-2\n")
    with pytest.raises(ValueError, match="strict.yaml"):
        run_monitor(root)
