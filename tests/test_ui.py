"""The Dagster UI: `autheval ui` serves the project on 127.0.0.1; headless Chromium opens the lineage
page and finds the asset names; the screenshot is kept as a test artifact (test-artifacts/)."""

from __future__ import annotations

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

import pytest

from tests.conftest import ROOT

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


@pytest.fixture
def ui_server(tmp_path):
    if not chromium():
        pytest.skip("Chromium is not installed (Debian package `chromium`; .ci/run installs it)")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    log = open(tmp_path / "ui.log", "w")
    # dagster dev started from a script must get default INT/TERM handlers (see stack.md)
    process = subprocess.Popen(
        [
            "env",
            "--default-signal=INT,TERM",
            sys.executable,
            "-m",
            "autheval",
            "ui",
            "--port",
            str(port),
            "--lake",
            str(tmp_path / "lake"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{base}/server_info", 180)
        request = urllib.request.Request(
            f"{base}/graphql",
            data=json.dumps({"query": "mutation { setNuxSeen }"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).read()
        yield base
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_lineage_page_shows_the_assets(ui_server):
    url = f"{ui_server}/assets/catalog?view=lineage&lineageScope=upstream&lineageDepth=10"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-lineage.png"
    shot.unlink(missing_ok=True)
    browse(url, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000
    dom = browse(url, "--dump-dom").stdout
    missing = [name for name in ASSETS if f">{name}<" not in dom]
    assert not missing, f"asset names missing from the lineage page: {missing}"
