"""Attacks on the lake's snapshots, its monitor folder and notifier, and the AUTHEVAL_* settings read at
start: committed snapshots past a CURRENT moved back by hand are never removed, a served snapshot that
misses a file is recovered, the notifier never writes through a link or hangs on a FIFO or a slow server,
and every setting is parsed in ASCII within its documented range (one line naming it, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import ROOT, run_cli
from warehouse import snapshots
from warehouse.lake import Lake
from warehouse.snapshots import SnapshotError

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def table(value: int) -> pa.Table:
    return pa.table({"run": [value] * 3, "i": [0, 1, 2]})


def small_lake(root: Path, writes: int) -> Lake:
    lake = Lake(root)
    for value in range(1, writes + 1):
        lake.write("a", table(value))
    return lake


def listing(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for folder in ("snapshots", "runs")
        for p in sorted((root / folder).rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli(*args, env={**ENV, **(env or {})}, timeout=timeout)


def one_line(result, *words, code=2) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


# --- 1. CURRENT moved back by hand: the committed snapshots past it are never removed ------------------


def test_committed_snapshots_past_a_current_moved_back_are_never_removed(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=10)
    (root / "CURRENT").write_text("5\n")
    before = listing(root)
    with pytest.raises(SnapshotError, match=r"snapshot\(s\) 6, 7, 8, 9, 10 past CURRENT .*lake recover"):
        Lake(root).write("b", table(11))
    assert listing(root) == before
    assert len(str(pytest.raises(SnapshotError, Lake(root).write, "b", table(11)).value).splitlines()) == 1
    result = cli("lake", "recover", "--lake", str(root))  # the newest whole one is served again
    assert result.returncode == 0 and "now serving snapshot 10" in result.stdout, result.stdout + result.stderr
    Lake(root).write("b", table(11))
    assert [m.snapshot for m in snapshots.committed_snapshots(Lake(root).location)][-2:] == [10, 11]


def test_what_a_killed_commit_left_is_still_removed(tmp_path):
    """A commit killed after its manifest, before CURRENT moved, left its marker: that manifest goes."""
    root = tmp_path / "lake"
    lake = small_lake(root, writes=2)
    real = snapshots._write_bytes

    def killed(location, path, data):
        if path.endswith("/CURRENT"):
            raise KeyboardInterrupt  # stands for kill -9 here: the process stops before the pointer moves
        real(location, path, data)

    snapshots._write_bytes = killed
    try:
        with pytest.raises(KeyboardInterrupt):
            lake.write("a", table(3))
    finally:
        snapshots._write_bytes = real
    assert (root / "snapshots" / "00000003.json").exists() and (root / "snapshots" / ".pending-00000003").exists()
    assert "nothing to recover" in cli("lake", "recover", "--lake", str(root)).stdout
    lake.write("a", table(4))
    assert [m.snapshot for m in snapshots.committed_snapshots(lake.location)] == [1, 2, 3]
    assert lake.read("a").column("run")[0].as_py() == 4
    assert not list((root / "snapshots").glob(".pending-*"))


# --- 4. the served snapshot misses a file: recover serves the newest whole one; readers say so ---------


def test_recover_checks_the_served_snapshots_files(tmp_path):
    root = tmp_path / "lake"
    lake = small_lake(root, writes=3)
    newest = Path(lake.table_files("a")[0])
    newest.unlink()
    refused = cli("query", "select * from a", "--lake", str(root))
    one_line(refused, newest.name, "lake recover")
    with pytest.raises(SnapshotError, match=f"{newest.name}.*lake recover"):
        Lake(root).read("a")
    result = cli("lake", "recover", "--lake", str(root))
    assert result.returncode == 0 and "now serving snapshot 4 (" not in result.stdout, result.stdout + result.stderr
    assert "now serving snapshot 4" in result.stdout
    assert Lake(root).read("a").column("run")[0].as_py() == 2
    assert "nothing to recover" in cli("lake", "recover", "--lake", str(root)).stdout


# --- 2, 3, 8. the monitor folder and its state files ---------------------------------------------------

from autheval.errors import RecordError
from autheval.monitoring.notify import notified, notify_new, send

ALERTS = [{"alert_id": "a1"}, {"alert_id": "a2"}]


def delivered(sent: list):
    return lambda payload: sent.append(payload["alert_id"])


def test_a_linked_monitor_folder_is_refused_and_nothing_is_written_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "monitor").symlink_to(outside)
    sent: list = []
    with pytest.raises(RecordError, match="monitor: is a symbolic link") as err:
        notify_new(lake, ALERTS, delivered(sent))
    assert err.value.exit_code == 2 and len(str(err.value).splitlines()) == 1
    assert list(outside.iterdir()) == [] and sent == []


@pytest.mark.parametrize("name", ["notified.json", ".notified.lock"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_in_place_of_a_state_file_is_refused_without_hanging(tmp_path, name, kind):
    lake = tmp_path / "lake"
    (lake / "monitor").mkdir(parents=True)
    target = lake / "monitor" / name
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    sent: list = []
    code = (
        "import sys\nfrom autheval.monitoring.notify import notify_new\n"
        "try:\n    notify_new(sys.argv[1], [{'alert_id': 'a1'}], lambda p: None)\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    result = subprocess.run(  # in a child: a hang on the FIFO is a timeout here, not a stuck test run
        [sys.executable, "-c", code, str(lake)], env=ENV, capture_output=True, text=True, timeout=30
    )
    assert result.stdout.startswith("RecordError") and name in result.stdout, result.stdout + result.stderr
    assert "not a regular file" in result.stdout and len(result.stdout.strip().splitlines()) == 1
    assert sent == []


@pytest.mark.parametrize(
    "text", ['{"notified": []}', '{"notified": {"a1": 1}}', "[]", '{"notified": {}, "other": 1}', '{"x": {}}']
)
def test_a_record_of_another_shape_is_refused_not_taken_for_empty(tmp_path, text):
    (tmp_path / "monitor").mkdir()
    (tmp_path / "monitor" / "notified.json").write_text(text)
    with pytest.raises(RecordError, match="not a record of notified alerts"):
        notify_new(tmp_path, ALERTS, delivered([]))
    assert (tmp_path / "monitor" / "notified.json").read_text() == text


def test_a_huge_record_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from autheval.monitoring import notify

    (tmp_path / "monitor").mkdir()
    path = tmp_path / "monitor" / "notified.json"
    with open(path, "wb") as handle:  # sparse: a large file that costs no disk
        handle.truncate(notify.MAX_NOTIFIED_BYTES + 1)
    read = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    with pytest.raises(RecordError, match="larger than"):
        notified(tmp_path)
    assert sum(read) < 1 << 20
    assert notify.notified.__module__  # the module is the one patched


# --- 5. a slow server: the whole delivery has a deadline ----------------------------------------------


def test_a_server_answering_a_line_at_a_time_is_cut_at_the_deadline(tmp_path):
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def drip():
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for i in range(20):  # 4 s of one header line at a time, each well within a per-read timeout
            time.sleep(0.2)
            with __import__("contextlib").suppress(OSError):
                conn.sendall(f"X-Slow-{i}: 1\r\n".encode())
        with __import__("contextlib").suppress(OSError):
            conn.sendall(b"Content-Length: 0\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/"
    result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, url=url, timeout=0.6))
    assert result.sent == [] and len(result.failed) == 1, result
    assert "within 0.6 s" in result.failed[0][1]
    assert notified(tmp_path) == {}
    thread.join(10)
    server.close()


# --- 9. a notifier child that left the process group is stopped with it ------------------------------


def test_a_child_started_in_its_own_session_does_not_outlive_the_stop(tmp_path):
    marker = f"7.7{os.getpid()}"
    command = f"sh -c 'setsid sleep {marker} & sleep 100'"
    result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, command=command, timeout=0.5))
    assert result.sent == [] and "did not exit" in result.failed[0][1]
    import time

    time.sleep(0.2)
    left = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                left.append(int(entry.name))
    for pid in left:  # the test's own clean-up on the old code
        os.kill(pid, 9)
    assert left == []


# --- 6, 7. settings parsed in ASCII, each within its documented range --------------------------------

BAD_SETTINGS = [
    ("AUTHEVAL_DUCKDB_MEMORY", "\u0665GB"),
    ("AUTHEVAL_QUERY_SPILL", "\u0665"),
    ("AUTHEVAL_LAKE_WAIT", "\u0665"),
    ("AUTHEVAL_LAKE_WAIT", "1e3"),
    ("AUTHEVAL_MEMORY_LIMIT", "0"),
    ("AUTHEVAL_MEMORY_LIMIT", "5"),
    ("AUTHEVAL_MEMORY_LIMIT", "9" * 30),
    ("AUTHEVAL_MEMORY_LIMIT", "\u0665GB"),
    ("AUTHEVAL_COMPILED", "abc"),
    ("AUTHEVAL_COMPILED", "-1"),
]


@pytest.mark.parametrize(("variable", "value"), BAD_SETTINGS)
def test_each_setting_is_checked_at_start_in_one_line_naming_it(monkeypatch, variable, value):
    from assets.resources import check_environment

    monkeypatch.setenv(variable, value)
    with pytest.raises((ValueError, RecordError)) as err:
        check_environment()
    assert variable in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)


def test_sizes_are_ascii_only():
    from warehouse.sql import size_bytes

    assert size_bytes("\u0665GB") is None and size_bytes("\uff15MB") is None
    assert size_bytes("5GB") == 5_000_000_000 and size_bytes("1.5 GiB") == 1.5 * 2**30


@pytest.mark.parametrize("value", ["", "0", "1"])
def test_the_documented_compiled_values_are_taken(monkeypatch, value):
    from autheval.estimation.compiled_stream import compiled_setting

    monkeypatch.setenv("AUTHEVAL_COMPILED", value)
    assert compiled_setting() is (value != "0")
