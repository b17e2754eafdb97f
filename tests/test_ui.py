"""The Dagster UI: `autheval ui` serves the project on 127.0.0.1; headless Chromium opens the lineage
page and finds the asset names, and the `monitor` asset's page shows what `autheval monitor run` from the
command line (cron) did: both use the lake's instance, <lake>/.dagster_home (issue 28, item 2.5). One
server for the module, on a lake the command line landed and monitored first; the screenshots are kept
as test artifacts (test-artifacts/)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=20000",
    "--window-size=1800,1100",
]
ASSETS = [
    "images",
    "clusters",
    "proposals",
    "selections",
    "scores",
    "records",
    "estimates",
    "contrasts",
    "study_summary",
    "landed_records",
    "trend",
    "catalog",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {seconds} s")


def browse(url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        return subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def graphql(base: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{base}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert "errors" not in answer, answer
    return answer["data"]


@contextlib.contextmanager
def serving(lake: Path, log: Path, env: dict):
    """`autheval ui` on `lake` (a free port) until the block ends, then stopped as Ctrl-C stops it; the
    base URL. Nothing is asked of the UI first (no setNuxSeen): what a user sees on a first visit."""
    port = free_port()
    with open(log, "w") as out:
        # dagster dev started from a script must get default INT/TERM handlers (see stack.md)
        process = subprocess.Popen(
            ["env", "--default-signal=INT,TERM", sys.executable, "-m", "autheval", "ui", "--port", str(port)]
            + ["--lake", str(lake)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{base}/server_info", 180)
            yield base
        finally:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# a deployment whose intervention rate is past the protocol's bound from its first month: an alert in force
DRIFT = "site-1:review_capacity:0.6:from=1"


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """The UI on a lake whose logs `autheval synth deployment` wrote and `autheval monitor run` landed and
    monitored from the command line, as cron does, before the UI started (DAGSTER_HOME unset for both:
    the lake's own instance); (base URL, lake)."""
    if not chromium():
        pytest.skip("Chromium is not installed (Debian package `chromium`; .ci/run installs it)")
    root = tmp_path_factory.mktemp("ui")
    lake = root / "lake"
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    synth = ("synth", "deployment", "--sites", "1", "--months", "2", "--clusters-per-month", "40")
    made = run_cli(*synth, "--drift", DRIFT, "--out", str(lake / "landing"), env=env, timeout=120)
    assert made.returncode == 0, made.stderr
    (lake / "landing" / "deployment.json").unlink()
    monitored = run_cli("monitor", "run", "--lake", str(lake), env=env, timeout=300)
    assert monitored.returncode == 3, monitored.stderr  # 3: something alerts
    with serving(lake, root / "ui.log", env) as base:
        yield base, lake


def test_lineage_page_shows_the_assets(ui_server):
    base, _ = ui_server
    url = f"{base}/assets/catalog?view=lineage&lineageScope=upstream&lineageDepth=10"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-lineage.png"
    shot.unlink(missing_ok=True)
    browse(url, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000
    dom = browse(url, "--dump-dom").stdout
    missing = [name for name in ASSETS if f">{name}<" not in dom]
    assert not missing, f"asset names missing from the lineage page: {missing}"


MONITOR_QUERY = """{
  shouldShowNux
  runsOrError { ... on Runs { results { runId jobName status } } }
  assetOrError(assetKey: {path: ["monitor"]}) { ... on Asset { assetMaterializations(limit: 1) { runId } } }
  assetNodeOrError(assetKey: {path: ["monitor"]}) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks { name executionForLatestMaterialization { runId status } } } }
    }
  }
}"""


def test_the_ui_shows_what_monitor_run_from_cron_did(ui_server):
    """The cron pass's runs are listed, the `monitor` asset is materialized by its recurring run and its
    check evaluated (failed: an alert is in force), and no community pop-up covers the first page."""
    base, _ = ui_server
    data = graphql(base, MONITOR_QUERY)
    assert data["shouldShowNux"] is False  # nux off in the instance settings; setNuxSeen was never called
    runs = data["runsOrError"]["results"]
    assert sorted((r["jobName"], r["status"]) for r in runs) == [
        ("landed_logs_job", "SUCCESS"),
        ("landed_logs_job", "SUCCESS"),
        ("recurring_evaluation", "SUCCESS"),
    ]
    [recurring] = [r["runId"] for r in runs if r["jobName"] == "recurring_evaluation"]
    assert data["assetOrError"]["assetMaterializations"] == [{"runId": recurring}]
    checks = data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    assert [(c["name"], c["executionForLatestMaterialization"]) for c in checks] == [
        ("monitor_has_no_alerts", {"runId": recurring, "status": "FAILED"})
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-monitor.png"
    shot.unlink(missing_ok=True)
    browse(f"{base}/assets/monitor", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000
    page = browse(f"{base}/assets/monitor", "--dump-dom").stdout
    (ARTIFACTS / "ui-monitor.html").write_text(page)
    assert ">Latest materialization<" in page and "Never materialized" not in page
    assert ">Latest check results<" in page and "Not evaluated" not in page
    assert "Join the Dagster community" not in page
    listed = browse(f"{base}/runs", "--dump-dom").stdout
    assert recurring[:8] in listed and "Join the Dagster community" not in listed
