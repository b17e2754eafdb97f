"""A team's server (issue 31): the Dagster instance on a real PostgreSQL server, chosen by
$AUTHEVAL_DAGSTER_PG_URL (assets.resources.dagster_pg_url; dagster_project.definitions.instance_yaml).
A cron-started `monitor run` records its runs, materializations and check into Postgres; the lake's
dagster.yaml names the variable, never the password; a bad URL (no scheme, another scheme, nothing
listening, a wrong password) is one line naming the variable, exit 2, before anything lands; the database
stopped under a pass fails it in one line, exit 1, the lake keeping its last snapshot, and the next pass
lands what waited. The server is a temporary cluster started here (initdb, pg_ctl) as an unprivileged
user; these tests skip, with the reason, only where PostgreSQL's initdb is not installed."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import psycopg2
import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance
from dagster_postgres import PostgresRunStorage

from assets.monitor import MONITOR, NO_ALERTS
from assets.resources import PG_URL_ENV
from assets.trend import recurring_evaluation_job
from autheval.cli.main import main
from dagster_project.definitions import LAKE_DAGSTER_HOME, PG_STORAGE, instance_home, lake_instance
from tests.test_hostile_lake import drop_logs, listing, run_monitor
from tests.test_ui import browse, chromium, free_port, graphql, wait_for
from warehouse.lake import Lake

PASSWORD = "s3cret-not-in-the-lake"
SUPERUSER = "autheval"


def _pg_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian: /usr/lib/postgresql/<major>/bin), else PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    initdb = found[-1] if found else shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Cluster:
    """A temporary PostgreSQL cluster owned by an unprivileged system user (initdb refuses root): password
    (scram) authentication on 127.0.0.1:port, trust on its unix socket in its own folder."""

    def __init__(self, bin_dir: Path):
        self.bin, self.port = bin_dir, free_port()
        self.root = Path(tempfile.mkdtemp(prefix="autheval-pg-"))  # not under root's 0700 pytest folders
        self.user = None
        if os.geteuid() == 0:
            self.user = next(u for u in ("postgres", "nobody") if _user_exists(u))
            os.chown(self.root, pwd.getpwnam(self.user).pw_uid, -1)
        self._as_owner(
            "initdb", "-D", str(self.root / "data"), "-U", SUPERUSER, "-E", "UTF8", "--no-sync",
            "--auth-local=trust", "--auth-host=scram-sha-256",
        )  # fmt: skip
        self.start()
        self.psql(f"ALTER USER {SUPERUSER} PASSWORD '{PASSWORD}'")

    def _as_owner(self, program: str, *args: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        subprocess.run([*prefix, str(self.bin / program), *args], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} -c fsync=off"
        data, log = str(self.root / "data"), str(self.root / "log")
        self._as_owner("pg_ctl", "-D", data, "-l", log, "-w", "-o", options, "start")

    def stop(self) -> None:
        self._as_owner("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")

    def psql(self, sql: str) -> None:
        connection = psycopg2.connect(host=str(self.root), port=self.port, user=SUPERUSER, dbname="postgres")
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
        finally:
            connection.close()

    def new_database(self) -> str:
        """A fresh database for one test: its URL (no password: that is $PGPASSWORD's)."""
        name = f"dagster_{uuid.uuid4().hex[:8]}"
        self.psql(f"CREATE DATABASE {name}")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def remove(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="module")
def cluster():
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql)")
    made = Cluster(bin_dir)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def pg_env(cluster, monkeypatch):
    """$AUTHEVAL_DAGSTER_PG_URL naming a fresh database, the password in $PGPASSWORD, DAGSTER_HOME unset."""
    url = cluster.new_database()
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv(PG_URL_ENV, url)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return url


def monitor_cli(lake: Path, capsys) -> tuple[int, list[str]]:
    """`autheval monitor run --lake lake` in this process: (exit code, stderr's lines)."""
    capsys.readouterr()
    with warnings.catch_warnings():  # few clusters: noisy intervals, said by a warning
        warnings.simplefilter("ignore")
        code = main(["monitor", "run", "--lake", str(lake)])
    return code, capsys.readouterr().err.strip().splitlines()


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_cron_monitor_run_records_into_postgres_and_the_lake_keeps_no_password(pg_env, tmp_path, capsys):
    lake = tmp_path / "lake"
    drop_logs(lake)
    code, err = monitor_cli(lake, capsys)
    assert code in (0, 3), err
    home = lake / LAKE_DAGSTER_HOME
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings["storage"] == PG_STORAGE == {"postgres": {"postgres_url": {"env": PG_URL_ENV}}}
    assert not list(home.rglob("*.db")), "runs went to sqlite files, not to Postgres"
    assert not files_holding(lake, PASSWORD)
    instance = DagsterInstance.from_config(str(home))  # the same configuration, read back
    try:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        runs = instance.get_runs()
        assert sorted(r.job_name for r in runs) == ["landed_logs_job"] * 2 + [recurring_evaluation_job.name]
        assert all(r.is_success for r in runs)
        [recurring] = [r for r in runs if r.job_name == recurring_evaluation_job.name]
        materialized = instance.get_latest_materialization_event(AssetKey(MONITOR))
        assert materialized is not None and materialized.run_id == recurring.run_id
        checks = instance.get_records_for_run(recurring.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        assert NO_ALERTS in {r.event_log_entry.dagster_event.event_specific_data.check_name for r in checks.records}
    finally:
        instance.dispose()
    # unset again, the lake's generated dagster.yaml goes back to sqlite (one edited by hand would be kept)
    os.environ.pop(PG_URL_ENV)
    assert "storage" not in yaml.safe_load((instance_home(lake) / "dagster.yaml").read_text())


@pytest.mark.parametrize(
    "case,url,password,words",
    [
        ("no scheme", "autheval@127.0.0.1:{port}/db", PASSWORD, "no scheme"),
        ("another scheme", "mysql://autheval@127.0.0.1:{port}/db", PASSWORD, "scheme mysql://"),
        ("nothing listening", "postgresql://autheval@127.0.0.1:{closed}/db", PASSWORD, "Connection refused"),
        ("wrong password", "{url}", "not-the-password", "password authentication failed"),
        ("no database", "postgresql://autheval@127.0.0.1:{port}", PASSWORD, "names no database"),
        ("a port that is no number", "postgresql://autheval@127.0.0.1:abc/db", PASSWORD, "does not parse"),
    ],
)
def test_a_bad_database_setting_is_one_line_naming_the_variable_before_anything_lands(
    pg_env, cluster, tmp_path, monkeypatch, capsys, case, url, password, words
):
    lake = tmp_path / "lake"
    drop_logs(lake)
    monkeypatch.setenv(PG_URL_ENV, url.format(port=cluster.port, closed=free_port(), url=pg_env))
    monkeypatch.setenv("PGPASSWORD", password)
    code, err = monitor_cli(lake, capsys)
    assert code == 2 and len(err) == 1 and f"${PG_URL_ENV}" in err[0] and words in err[0], (case, err)
    assert PASSWORD not in err[0]
    assert not (lake / "CURRENT").exists() and len(list((lake / "landing").glob("*.csv*"))) == 2


def test_the_database_stopped_under_a_pass_fails_it_in_one_line_and_the_lake_keeps_its_snapshot(
    pg_env, cluster, tmp_path, monkeypatch, capsys
):
    import dagster_project.monitor_run as monitor_run_module

    lake = tmp_path / "lake"
    drop_logs(lake, months=2)
    waiting = sorted((lake / "landing").iterdir())
    waiting[-1].rename(tmp_path / waiting[-1].name)  # the second month arrives later
    code, err = monitor_cli(lake, capsys)
    assert code in (0, 3), err
    before, committed = Lake(lake).snapshot(), listing(lake)
    (tmp_path / waiting[-1].name).rename(waiting[-1])

    real_pass = monitor_run_module._pass

    def database_goes_down(*args, **kwargs):  # the checks passed and the instance is open: the server stops
        cluster.stop()
        return real_pass(*args, **kwargs)

    monkeypatch.setattr(monitor_run_module, "_pass", database_goes_down)
    try:
        code, err = monitor_cli(lake, capsys)
    finally:
        cluster.start()
    assert code == 1 and len(err) == 1 and err[0].startswith(f"autheval: error: ${PG_URL_ENV}:"), err
    assert "stopped answering" in err[0] and PASSWORD not in err[0]
    assert Lake(lake).snapshot() == before and listing(lake) == committed
    monkeypatch.setattr(monitor_run_module, "_pass", real_pass)
    code, err = monitor_cli(lake, capsys)  # the database back: the next pass lands what waited
    assert code in (0, 3), err
    assert Lake(lake).snapshot() != before and not list((lake / "landing").glob("*.csv*"))


def children_of(pid: int) -> set[int]:
    """Every process descended from `pid` (Linux /proc), zombies left out."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def wait_until(what: str, seconds: float, test) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if test():
            return
        time.sleep(2)
    raise TimeoutError(f"{what}: not within {seconds} s")


def successful_runs(lake: Path, job: str) -> list:
    with lake_instance(lake) as instance:  # the URL with its driver named, as every command opens it
        return [r for r in instance.get_runs() if r.job_name == job and r.is_success]


def ended_runs(lake: Path, job: str) -> list:
    with lake_instance(lake) as instance:
        return [r for r in instance.get_runs() if r.job_name == job and r.status.value in TERMINAL]


def instigator_ticks(lake: Path, name: str) -> list:
    with lake_instance(lake) as instance:
        states = [s for s in instance.all_instigator_state() if s.instigator_name == name]
        return [t for s in states for t in instance.get_ticks(s.instigator_origin_id, s.selector_id)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc (Linux)")
def test_serve_on_postgres_ticks_the_schedule_and_lands_a_dropped_log_and_sigterm_stops_both(pg_env, tmp_path):
    lake, port = tmp_path / "lake", free_port()
    (lake / "landing").mkdir(parents=True)
    env = {**os.environ, "AUTHEVAL_MONITOR_CRON": "* * * * *", "HF_HUB_OFFLINE": "1"}  # a tick every minute
    args = ["--lake", str(lake), "--host", "127.0.0.1", "--port", str(port)]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "autheval", "serve", *args], env=env, stdout=log, stderr=log)
    try:
        wait_for(f"http://127.0.0.1:{port}/server_info", 120)
        check = lambda: subprocess.run(  # noqa: E731
            [sys.executable, "-m", "autheval", "serve", "--check", *args], env=env, capture_output=True, text=True
        )
        wait_until("the daemon's heartbeat", 90, lambda: check().returncode == 0)
        lines = check().stdout.splitlines()
        assert [line.split()[:2] for line in lines] == [["webserver", "ok"], ["daemon", "ok"]], lines
        drop_logs(tmp_path / "dropped", months=1)  # a log dropped into landing lands under the sensor
        for made in (tmp_path / "dropped" / "landing").iterdir():
            made.rename(lake / "landing" / made.name)
        # a terminal run ends the wait at once; 600 s is room for a 2-core machine busy with the suite
        wait_until("the landing sensor's run ending", 600, lambda: ended_runs(lake, "landed_logs_job"))
        with lake_instance(lake) as instance:
            failed = {r.run_id: run_errors(instance, r.run_id) for r in ended_runs(lake, "landed_logs_job")}
        assert successful_runs(lake, "landed_logs_job"), failed
        wait_until("the landed log leaving landing", 30, lambda: not list((lake / "landing").glob("*.csv*")))
        wait_until("the schedule's tick", 120, lambda: instigator_ticks(lake, "recurring_evaluation_schedule"))
        assert instigator_ticks(lake, "landing_sensor")
        started = children_of(server.pid)
        assert len(started) >= 2
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=90)
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    assert not [pid for pid in started if alive(pid)], "a service outlived SIGTERM"
    assert check().returncode == 1  # neither answers now


def test_serve_refuses_an_address_this_machine_does_not_have(tmp_path, capsys):
    capsys.readouterr()
    code = main(["serve", "--lake", str(tmp_path / "lake"), "--host", "192.0.2.1", "--port", str(free_port())])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--host: 192.0.2.1 is not an address of this machine" in err[0], err


def test_without_the_team_extra_the_setting_is_one_line(monkeypatch):
    import importlib.util

    from assets.resources import dagster_pg_url

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg2" else real(name, *a))
    monkeypatch.setenv(PG_URL_ENV, "postgresql://autheval@127.0.0.1:5432/db")
    with pytest.raises(ValueError, match=r"\$AUTHEVAL_DAGSTER_PG_URL=.*needs the team extra"):
        dagster_pg_url()


def test_a_dagster_yaml_edited_by_hand_is_kept_whatever_the_setting(pg_env, tmp_path):
    lake = tmp_path / "lake"
    home = lake / LAKE_DAGSTER_HOME
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n# ours\n")
    assert instance_home(lake) == home and (home / "dagster.yaml").read_text().endswith("# ours\n")
    (home / "dagster.yaml").unlink()
    instance_home(lake)  # generated: Postgres while the variable is set
    assert yaml.safe_load((home / "dagster.yaml").read_text())["storage"] == PG_STORAGE


@contextlib.contextmanager
def team_server(lake: Path, log_path: Path, env: dict):
    """`autheval serve` on `lake` until the block ends, then SIGTERM: (its base URL, the serve process)."""
    port = free_port()
    with log_path.open("w") as log:
        args = ["--lake", str(lake), "--host", "127.0.0.1", "--port", str(port)]
        server = subprocess.Popen([sys.executable, "-m", "autheval", "serve", *args], env=env, stdout=log, stderr=log)
        try:
            wait_for(f"http://127.0.0.1:{port}/server_info", 120)
            yield f"http://127.0.0.1:{port}", server
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=90)


def run_errors(instance, run_id: str) -> str:
    """What a run's event log says went wrong: its messages and errors, in one text."""
    said = []
    for entry in instance.all_logs(run_id):
        error = getattr(getattr(entry.dagster_event, "event_specific_data", None), "error", None)
        said.append(entry.user_message or "")
        while error is not None:  # Dagster's wrapper, then what it wraps (the lake's own line)
            said.append(getattr(error, "message", "") or "")
            error = getattr(error, "cause", None)
    return " ".join(" ".join(said).split())


LAUNCH = """mutation { launchRun(executionParams: {selector: {repositoryLocationName: "%s",
  repositoryName: "%s", jobName: "%s"}, runConfigData: "{}"}) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def test_two_launches_at_once_from_two_sessions_one_runs_and_both_are_in_the_history(pg_env, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    lake = tmp_path / "lake"
    drop_logs(lake, months=1)
    code, lines = run_monitor(lake)
    assert code in (0, 3), lines
    before = Lake(lake).snapshot()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with team_server(lake, tmp_path / "serve.log", env) as (base, _):
        repositories = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
        [repo] = graphql(base, repositories)["repositoriesOrError"]["nodes"]
        launch = LAUNCH % (repo["location"]["name"], repo["name"], recurring_evaluation_job.name)
        with ThreadPoolExecutor(2) as sessions:  # two people press Materialize at the same moment
            answers = list(sessions.map(lambda _: graphql(base, launch)["launchRun"], range(2)))
        assert [a["__typename"] for a in answers] == ["LaunchRunSuccess"] * 2, answers
        launched = {a["run"]["runId"] for a in answers}

        def finished() -> dict:
            # a reader meanwhile: the served snapshot and the report stay readable while the runs compete
            assert Lake(lake).read("monitor").num_rows > 0
            assert "</html>" in (lake / "reports" / "report.html").read_text()
            with lake_instance(lake) as instance:
                runs = {r.run_id: r for r in instance.get_runs() if r.run_id in launched}
                return runs if len(runs) == 2 and all(r.status.value in TERMINAL for r in runs.values()) else {}

        wait_until("both launched runs ending", 600, finished)
        runs = finished()
        with lake_instance(lake) as instance:
            failures = {run_id: run_errors(instance, run_id) for run_id, run in runs.items() if not run.is_success}
        if chromium():  # the team's UI, in a real browser: both runs in the history, the monitor's check shown
            listed = browse(f"{base}/runs", "--dump-dom").stdout
            assert all(run_id[:8] in listed for run_id in launched), "a launched run is missing from the runs page"
            page = browse(f"{base}/assets/monitor", "--dump-dom").stdout
            assert ">Latest check results<" in page and "Not evaluated" not in page
            assert "Join the Dagster community" not in listed + page
    outcomes = sorted(r.status.value for r in runs.values())
    assert outcomes in (["SUCCESS", "SUCCESS"], ["FAILURE", "SUCCESS"]), (outcomes, failures)
    assert all("in use by run" in text for text in failures.values()), failures  # the writer lock's one line
    assert Lake(lake).snapshot() != before  # the one that ran committed
