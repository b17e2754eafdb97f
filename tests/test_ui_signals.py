"""`autheval ui` started in the background (as `autheval ui &` from a script: SIGINT ignored, a session of
its own) stops on SIGTERM and on SIGINT, and takes every process it started with it (dagster dev, the
webserver, the daemon, the code server); killed (SIGKILL), its processes stop all the same."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, exec_after
from tests.test_ui import free_port, wait_for

STOP_WITHIN = 60  # seconds from the signal until every process is gone


def children(pid: int) -> dict[int, int]:
    """{pid: parent pid} of every process in the tree below `pid` (read from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            parents[int(entry.name)] = int(fields[1])
    below, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in below:
                below[child] = ppid
                frontier.append(child)
    return below


def alive(pid: int) -> bool:
    """Is `pid` a process that still runs (a zombie, dead but not reaped, does not count)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


# What a non-interactive shell does to a job started with `&`: SIGINT and SIGQUIT ignored, then the
# command exec'd (the ignored dispositions carry over; conftest.exec_after, not a preexec_fn).
AS_IN_THE_BACKGROUND = exec_after(
    "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGQUIT, signal.SIG_IGN)"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_ui_in_the_background_stops_with_all_its_children(tmp_path, sig):
    port = free_port()
    home = tmp_path / "dagster_home"
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    log = open(tmp_path / "ui.log", "w")
    process = subprocess.Popen(
        [
            *AS_IN_THE_BACKGROUND,
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
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tree: dict[int, int] = {}
    try:
        wait_for(f"http://127.0.0.1:{port}/server_info", 240)
        deadline = time.time() + 60  # the webserver, the daemon and the code server are up
        while time.time() < deadline and len(tree) < 4:
            tree = children(process.pid)
            time.sleep(1)
        assert len(tree) >= 3, f"expected dagster dev, its webserver and daemon below autheval ui: {tree}"
        process.send_signal(sig)  # to the command alone, as `kill PID` does
        try:
            code = process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            code = None
        # killed, it cannot pass the signal on: dagster dev is told by the kernel (parent death signal)
        deadline = time.time() + (STOP_WITHIN if sig == signal.SIGKILL else 10)
        while time.time() < deadline and any(alive(pid) for pid in tree):
            time.sleep(0.5)
        left = sorted(pid for pid in tree if alive(pid))
        assert code is not None, f"autheval ui still runs {STOP_WITHIN} s after {sig.name}"
        assert not left, f"still running after {sig.name}: {left} of {tree}"
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 0), (tmp_path / "ui.log").read_text()[-3000:]
    finally:
        for pid in [process.pid, *tree]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)
        log.close()
