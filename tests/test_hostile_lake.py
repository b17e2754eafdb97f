"""The lake against a hostile folder (issue 27): its pointer, lock, manifests and catalogs lost, corrupted,
linked out or left by a killed writer; two writers at once; bad AUTHEVAL_* settings. Every test runs on a
real lake built by the project's own functions and commands (Lake.write, monitor_run, the CLI): a lake in
an odd state is refused in one line by every entry point and nothing committed is removed; the explicit
way back is `autheval lake recover`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import ROOT, run_cli
from warehouse import snapshots
from warehouse.catalog import query
from warehouse.lake import Lake
from warehouse.snapshots import LakeBusy, SnapshotError

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def table(value: int, n: int = 3) -> pa.Table:
    return pa.table({"run": [value] * n, "i": list(range(n))})


def listing(root: Path) -> dict[str, bytes]:
    """Every committed thing of a lake (manifests, catalogs, run files) and its bytes."""
    found = {}
    for folder in ("snapshots", "runs"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def one_line_error(result, *words, code=2) -> str:
    """Exit `code` with exactly one line on stderr (no traceback) holding every word; the line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli(*args, env={**ENV, **(env or {})}, timeout=timeout)


def small_lake(root: Path, writes: int = 2, keep: int | None = None) -> Lake:
    lake = Lake(root, keep_snapshots=keep)
    for value in range(1, writes + 1):
        lake.write("a", table(value))
    return lake


def drop_logs(root: Path, months: int = 2, only_last: bool = False) -> None:
    """The monthly logs of a simulated deployment in <root>/landing (`only_last`: the last month's alone,
    a new file for a lake that landed the others)."""
    from autheval.monitoring.deployment_sim import DeploymentModel, write_deployment

    made = write_deployment(DeploymentModel(sites=1, months=months, clusters_per_month=30), root / "landing.new")
    (root / "landing").mkdir(parents=True, exist_ok=True)
    for log in made[-1:] if only_last else made:
        log.rename(root / "landing" / log.name)
    shutil.rmtree(root / "landing.new")


def run_monitor(root: Path) -> tuple[int, list[str]]:
    from dagster_project.monitor_run import monitor_run

    lines: list[str] = []
    return monitor_run(root, None, out=lines.append, settle_seconds=0.2), lines


@pytest.fixture(scope="module")
def monitored(tmp_path_factory) -> Path:
    """A lake built by `monitor run` (two landed logs, the recurring job): snapshots 1..3."""
    root = tmp_path_factory.mktemp("monitored") / "lake"
    drop_logs(root)
    code, lines = run_monitor(root)
    assert code == 0, lines
    assert (root / "CURRENT").read_text().strip() == "3"
    return root


@pytest.fixture
def lake_copy(monitored, tmp_path) -> Path:
    copy = tmp_path / "lake"
    shutil.copytree(monitored, copy, symlinks=True)
    return copy


# --- 1. the pointer: missing, garbage, a link, naming what is not there ---------------------------------


def test_a_missing_pointer_is_refused_by_monitor_run_and_nothing_is_removed(lake_copy):
    before = listing(lake_copy)
    (lake_copy / "CURRENT").unlink()
    drop_logs(lake_copy, months=3, only_last=True)  # something waits to land: it must stay where it is
    waiting = sorted(p.name for p in (lake_copy / "landing").glob("*.csv"))
    result = cli("monitor", "run", "--lake", str(lake_copy))
    one_line_error(result, "CURRENT is missing", "snapshots 1, 2, 3", "autheval lake recover")
    assert listing(lake_copy) == before  # manifests, catalogs and run files all kept
    assert sorted(p.name for p in (lake_copy / "landing").glob("*.csv")) == waiting
    assert not (lake_copy / "CURRENT").exists()


def pointer_states(root: Path, outside: Path) -> dict:
    """What CURRENT can be made into, each a state every reader and writer refuses."""
    return {
        "missing": lambda: (root / "CURRENT").unlink(),
        "empty": lambda: (root / "CURRENT").write_text(""),
        "garbage": lambda: (root / "CURRENT").write_text("three\n"),
        "unicode digit": lambda: (root / "CURRENT").write_text("\u0663\n"),
        "huge": lambda: (root / "CURRENT").write_text("1" * 100_000),
        "not there": lambda: (root / "CURRENT").write_text("7\n"),
        "a folder": lambda: ((root / "CURRENT").unlink(), (root / "CURRENT").mkdir()),
        "a link": lambda: ((root / "CURRENT").unlink(), (root / "CURRENT").symlink_to(outside)),
    }


STATES = ["missing", "empty", "garbage", "unicode digit", "huge", "not there", "a folder", "a link"]


@pytest.mark.parametrize("state", STATES)
def test_an_odd_pointer_is_refused_by_readers_and_writers_and_nothing_is_removed(tmp_path, state):
    root = tmp_path / "lake"
    small_lake(root, writes=3)
    outside = tmp_path / "outside"
    outside.write_text("2\n")  # a pointer elsewhere that would name a real snapshot
    pointer_states(root, outside)[state]()
    before = listing(root)
    for attempt in (
        lambda: Lake(root).read("a"),
        lambda: Lake(root).write("a", table(9)),
        lambda: query(Lake(root), "select * from a"),
        lambda: Lake(root, snapshot=2).read("a"),
    ):
        with pytest.raises(SnapshotError) as err:
            attempt()
        assert "\n" not in str(err.value) and "recover" in str(err.value), str(err.value)
    assert listing(root) == before
    assert outside.read_text() == "2\n"


@pytest.mark.parametrize("state", ["missing", "not there", "a link", "a folder", "garbage"])
def test_lake_recover_serves_the_newest_whole_snapshot_and_removes_nothing(tmp_path, state):
    root = tmp_path / "lake"
    small_lake(root, writes=3)
    outside = tmp_path / "outside"
    outside.write_text("2\n")
    pointer_states(root, outside)[state]()
    before = listing(root)
    result = cli("lake", "recover", "--lake", str(root))
    assert result.returncode == 0, result.stderr
    assert "now serving snapshot 3" in result.stdout and "nothing was removed" in result.stdout
    assert Lake(root).read("a").column("run")[0].as_py() == 3
    assert query(Lake(root), "select distinct run from a").to_pylist() == [{"run": 3}]
    assert set(before) <= set(listing(root))  # nothing removed (a catalog may be rebuilt)
    assert outside.read_text() == "2\n"
    if state in ("a link", "a folder", "garbage"):  # the odd pointer is kept aside, not removed
        assert [p.name.startswith("CURRENT.odd-") for p in root.iterdir() if p.name.startswith("CURRENT.")] == [True]
    Lake(root).write("b", table(4))  # the next writer takes the lake as it is: every snapshot kept
    assert [m.snapshot for m in snapshots.committed_snapshots(Lake(root).location)] == [1, 2, 3, 4]


def test_lake_recover_of_an_older_snapshot_commits_it_again_and_keeps_the_newer(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=3)
    (root / "CURRENT").unlink()
    result = cli("lake", "recover", "--lake", str(root), "--snapshot", "2")
    assert result.returncode == 0, result.stderr
    assert "now serving snapshot 4 (the tables of snapshot 2" in result.stdout
    assert Lake(root).read("a").column("run")[0].as_py() == 2
    assert Lake(root, snapshot=3).read("a").column("run")[0].as_py() == 3  # the newer one is still there
    Lake(root).write("b", table(5))
    assert [m.snapshot for m in snapshots.committed_snapshots(Lake(root).location)] == [1, 2, 3, 4, 5]


def test_lake_recover_skips_a_snapshot_whose_files_are_gone(tmp_path):
    root = tmp_path / "lake"
    lake = small_lake(root, writes=2)
    newest = Path(lake.table_files("a")[0])
    os.chmod(newest, 0o644)
    newest.unlink()
    (root / "CURRENT").unlink()
    result = cli("lake", "recover", "--lake", str(root))
    assert result.returncode == 0, result.stderr
    assert Lake(root).read("a").column("run")[0].as_py() == 1
    refused = cli("lake", "recover", "--lake", str(root), "--snapshot", "9")
    one_line_error(refused, "snapshot 9 has no manifest")


def test_a_healthy_pointer_needs_no_recovery(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=2)
    before = listing(root)
    result = cli("lake", "recover", "--lake", str(root))
    assert result.returncode == 0 and "nothing to recover" in result.stdout, result.stderr
    assert listing(root) == before and (root / "CURRENT").read_text() == "2\n"


# --- 2. the lock and the lake's folders as links ------------------------------------------------------


@pytest.mark.parametrize("kind", ["symlink", "hard link", "dangling symlink"])
def test_the_writer_lock_is_never_followed(tmp_path, kind):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    precious = tmp_path / "precious.txt"
    precious.write_text("do not touch\n")
    lock = root / ".writer.lock"
    lock.unlink()
    if kind == "symlink":
        lock.symlink_to(precious)
    elif kind == "hard link":
        os.link(precious, lock)
    else:
        lock.symlink_to(tmp_path / "created-outside")
    before = listing(root)
    with pytest.raises(SnapshotError, match=r"\.writer\.lock: the lake's lock is") as err:
        Lake(root).write("a", table(2))
    assert "\n" not in str(err.value)
    assert precious.read_text() == "do not touch\n" and not (tmp_path / "created-outside").exists()
    assert listing(root) == before


def test_monitor_run_refuses_a_linked_lock_in_one_line(lake_copy, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("do not touch\n")
    (lake_copy / ".writer.lock").unlink()
    (lake_copy / ".writer.lock").symlink_to(precious)
    result = cli("monitor", "run", "--lake", str(lake_copy))
    one_line_error(result, ".writer.lock", "symbolic link")
    assert precious.read_text() == "do not touch\n"


@pytest.mark.parametrize("folder", ["runs", "snapshots", "reports"])
def test_a_lake_folder_linked_out_is_refused_before_anything_is_written(tmp_path, folder):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    outside = tmp_path / "outside"
    if (root / folder).exists():
        shutil.copytree(root / folder, outside)
        shutil.rmtree(root / folder)
    else:
        outside.mkdir()
    (root / folder).symlink_to(outside)
    before = sorted(str(p) for p in outside.rglob("*"))
    with pytest.raises(SnapshotError, match="symbolic link"):
        Lake(root).write("a", table(2))
    assert sorted(str(p) for p in outside.rglob("*")) == before


def test_clean_up_never_follows_a_link_out_of_runs(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.parquet").write_bytes(b"someone else's")
    (root / "runs" / "evil").symlink_to(outside)
    Lake(root).write("a", table(2))  # a writer takes the lock and removes what no snapshot names
    assert (outside / "keep.parquet").read_bytes() == b"someone else's"
    assert not (root / "runs" / "evil").is_symlink()  # the stray link itself is gone


@pytest.mark.parametrize("folder", ["processed", "rejected", "duplicates"])
def test_landing_never_keeps_its_records_through_a_link(tmp_path, folder):
    root = tmp_path / "lake"
    drop_logs(root)
    (root / "landing" / "broken.csv").write_text("case_id\nx\n")  # would be rejected
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "landing" / folder).symlink_to(outside)
    code, lines = run_monitor(root)
    assert code == 1, (code, lines)  # a run that handled nothing fails, so that cron sees it on every run
    assert any(line.startswith("skipped") and f"{folder}: a symbolic link" in line for line in lines), lines
    assert not any(line.startswith(("landed", "rejected")) for line in lines), lines
    assert list(outside.iterdir()) == [] and len(list((root / "landing").glob("*.csv"))) == 3


# --- 6. manifests naming paths outside the lake -------------------------------------------------------


def served_manifest(root: Path) -> Path:
    return root / "snapshots" / f"{int((root / 'CURRENT').read_text()):08d}.json"


@pytest.mark.parametrize("where", ["../outside_dir/monitor.parquet", "absolute", "runs/../../outside_dir/m.parquet"])
def test_monitor_status_refuses_a_manifest_entry_outside_the_lake(lake_copy, tmp_path, where):
    path = served_manifest(lake_copy)
    manifest = json.loads(path.read_text())
    outside = lake_copy.parent / "outside_dir"
    outside.mkdir()
    shutil.copy(lake_copy / manifest["tables"]["monitor"]["file"], outside / "monitor.parquet")
    target = str(outside / "monitor.parquet") if where == "absolute" else where
    manifest["tables"]["monitor"]["file"] = target
    path.write_text(json.dumps(manifest))
    result = cli("monitor", "status", "--lake", str(lake_copy))
    one_line_error(result, str(path), "not a path inside the lake")
    with pytest.raises(SnapshotError, match="not a path inside the lake"):
        Lake(lake_copy).read("monitor")
    refused = cli("query", "select count(*) from monitor", "--lake", str(lake_copy))
    one_line_error(refused, "not a path inside the lake")


def test_a_published_file_outside_the_lake_is_refused(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    path = served_manifest(root)
    manifest = json.loads(path.read_text())
    manifest["files"] = {"../escaped.txt": manifest["tables"]["a"]["file"]}
    path.write_text(json.dumps(manifest))
    with pytest.raises(SnapshotError, match="published file"):
        Lake(root).write("a", table(2))
    assert not (tmp_path / "escaped.txt").exists()
    with pytest.raises(ValueError, match="published file"):
        with Lake(tmp_path / "other").open_run("r"):
            Lake(tmp_path / "other").publish_path("../../escaped.txt")


def test_a_run_folder_linked_out_is_not_read_through(lake_copy, tmp_path):
    manifest = json.loads(served_manifest(lake_copy).read_text())
    run = lake_copy / Path(manifest["tables"]["monitor"]["file"]).parent
    moved = tmp_path / "moved_run"
    shutil.move(run, moved)
    run.symlink_to(moved)
    result = cli("monitor", "status", "--lake", str(lake_copy))
    one_line_error(result, "outside lake", "symbolic link")


@pytest.mark.parametrize(
    "text",
    ['{"snapshot": 3}', "[1, 2]", "[" * 100_000, '{"snapshot": 3, "run_id": "r", "parent": 2, "committed_at": 1}'],
    ids=["missing keys", "not an object", "nested", "wrong type"],
)
def test_a_broken_manifest_is_one_line(tmp_path, text):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    served_manifest(root).write_text(text)
    with pytest.raises(SnapshotError, match="not a snapshot manifest") as err:
        Lake(root).read("a")
    assert "\n" not in str(err.value)


# --- 7. what a writer killed before its commit left is never served or listed ---------------------------


KILLED_BEFORE_COMMIT = """
import os, signal, sys
import pyarrow as pa
from warehouse import snapshots
from warehouse.lake import Lake
real = snapshots._write_bytes
def write(location, path, data):
    if path.endswith("/CURRENT"):
        os.kill(os.getpid(), signal.SIGKILL)  # after the manifest and its catalog, before the pointer moves
    real(location, path, data)
snapshots._write_bytes = write
Lake(sys.argv[1]).write("a", pa.table({"run": [99], "i": [0]}))
"""


def test_a_snapshot_left_by_a_killed_commit_is_not_served_nor_listed(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=2)
    killed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_COMMIT, str(root)], env=ENV, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (root / "snapshots" / "00000003.json").exists() and (root / "snapshots" / "00000003.duckdb").exists()
    result = run_cli("query", "select distinct run from a", "--lake", str(root), "--snapshot", "3")
    assert result.stderr.strip() == f"autheval: error: snapshot 3 is not kept in lake {root} (kept: 1, 2)"
    other = run_cli("query", "select 1", "--lake", str(root), "--snapshot", "7")
    one_line_error(other, "(kept: 1, 2)")
    with pytest.raises(SnapshotError, match=r"\(kept: 1, 2\)"):
        Lake(root, snapshot=3).read("a")
    kept = query(Lake(root), "select snapshot from lake_snapshots order by 1").to_pylist()
    assert kept == [{"snapshot": 1}, {"snapshot": 2}]
    assert Lake(root).read("a").column("run")[0].as_py() == 2


# --- catalogs of dropped snapshots ----------------------------------------------------------------


def test_the_catalogs_of_dropped_snapshots_are_removed(tmp_path):
    root = tmp_path / "lake"
    small_lake(root, writes=4, keep=2)
    assert sorted(p.name for p in (root / "snapshots").iterdir()) == [
        "00000003.duckdb",
        "00000003.json",
        "00000004.duckdb",
        "00000004.json",
    ]


# --- 9. AUTHEVAL_KEEP_SNAPSHOTS from every entry point --------------------------------------------


def test_monitor_run_keeps_the_declared_number_of_snapshots(lake_copy, monkeypatch):
    monkeypatch.setenv("AUTHEVAL_KEEP_SNAPSHOTS", "2")
    drop_logs(lake_copy, months=3, only_last=True)  # one new month lands, then the recurring job: two more snapshots
    code, lines = run_monitor(lake_copy)
    assert code == 0, lines
    # retention counts runs (issue 28, 1.4): the fixture's run (1..3) and this one (4, 5) are the last 2 runs
    assert sorted(p.name for p in (lake_copy / "snapshots").glob("*.json")) == [f"{n:08d}.json" for n in range(1, 6)]
    catalogs = sorted(p.name for p in (lake_copy / "snapshots").glob("*.duckdb"))
    assert catalogs == [f"{n:08d}.duckdb" for n in range(1, 6)]
    monkeypatch.setenv("AUTHEVAL_KEEP_SNAPSHOTS", "1")
    drop_logs(lake_copy, months=4, only_last=True)
    assert run_monitor(lake_copy)[0] == 0
    assert sorted(p.name for p in (lake_copy / "snapshots").glob("*.json")) == ["00000006.json", "00000007.json"]


def test_the_demo_keeps_the_declared_number_of_snapshots(tmp_path, monkeypatch):
    from dagster_project.demo import run_stages

    monkeypatch.setenv("AUTHEVAL_KEEP_SNAPSHOTS", "1")
    root = tmp_path / "lake"
    for _ in range(2):
        run_stages(root, stages=(), out=lambda line: None)
    assert sorted(p.name for p in (root / "snapshots").glob("*.json")) == ["00000002.json"]


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "", "99999999999"])
def test_a_bad_retention_is_refused_by_monitor_run_before_anything_lands(lake_copy, monkeypatch, value):
    drop_logs(lake_copy, months=3, only_last=True)
    before = listing(lake_copy)
    monkeypatch.setenv("AUTHEVAL_KEEP_SNAPSHOTS", value)
    if not value:  # empty: the default
        assert run_monitor(lake_copy)[0] == 0
        return
    with pytest.raises(SnapshotError, match=f"AUTHEVAL_KEEP_SNAPSHOTS={value!r}"):
        run_monitor(lake_copy)
    assert listing(lake_copy) == before and len(list((lake_copy / "landing").glob("*.csv"))) == 1


def test_a_bad_retention_is_one_line_from_the_command_line_and_the_ui(lake_copy):
    before = listing(lake_copy)
    env = {"AUTHEVAL_KEEP_SNAPSHOTS": "-1"}
    one_line_error(cli("monitor", "run", "--lake", str(lake_copy), env=env), "$AUTHEVAL_KEEP_SNAPSHOTS='-1'")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ui = cli("ui", "--lake", str(lake_copy), "--port", str(port), env=env, timeout=120)
    one_line_error(ui, "$AUTHEVAL_KEEP_SNAPSHOTS='-1'")
    assert listing(lake_copy) == before


# --- 16 and 19. two writers; the same one line from every entry point -----------------------------------


def test_two_monitor_runs_at_once_one_refused_in_one_line_nothing_lost(tmp_path):
    root = tmp_path / "lake"
    drop_logs(root)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "autheval", "monitor", "run", "--lake", str(root)],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    (_, refused_out, refused_err) = next(r for r in results if r[0] == 1)
    assert refused_out == "" and len(refused_err.strip().splitlines()) == 1, refused_err
    assert "in use by run monitor-" in refused_err and "AUTHEVAL_LAKE_WAIT" in refused_err
    (_, done_out, _) = next(r for r in results if r[0] == 0)
    assert sum(line.startswith("landed") for line in done_out.splitlines()) == 2
    assert not any(line.startswith("failed") for line in done_out.splitlines())
    assert len(Lake(root).read("landed_records").column("landed_key").unique()) == 2


HOLDER = """
import sys, time
from warehouse.lake import Lake
with Lake(sys.argv[1]).open_run("holder"):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold_lock(root: Path, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(seconds)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_second_writer_waits_when_told_to_and_lands_everything(lake_copy):
    drop_logs(lake_copy, months=3, only_last=True)
    holder = hold_lock(lake_copy, 2)
    result = cli("monitor", "run", "--lake", str(lake_copy), env={"AUTHEVAL_LAKE_WAIT": "120"})
    holder.wait(timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines() if line.startswith("landed")] == [
        "site-1_2026-03.csv:"
    ]


def in_parallel(commands: list[tuple[str, ...]]) -> list[subprocess.CompletedProcess]:
    """Run `autheval` command lines side by side (each starts Dagster: seconds apiece)."""
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "autheval", *args], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for args in commands
    ]
    done = []
    for process in started:
        out, err = process.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out.decode(), err.decode()))
    return done


def test_the_same_line_from_every_entry_point(lake_copy, tmp_path):
    """A corrupt pointer and a held lock: `monitor run`, `monitor status`, `query` and `demo` each say the
    lake's own line, no Dagster wrapper; the recurring job's failure names the cause too."""
    (lake_copy / "CURRENT").write_text("garbage\n")
    commands = [
        ("monitor", "run", "--lake", str(lake_copy)),
        ("monitor", "status", "--lake", str(lake_copy)),
        ("query", "select 1", "--lake", str(lake_copy)),
        ("demo", "--lake", str(lake_copy), "--reps", "200"),
    ]
    lines = set()
    for result in in_parallel(commands):
        lines.add(one_line_error(result, "CURRENT: names no snapshot ('garbage')", "autheval lake recover"))
    assert len(lines) == 1, lines

    (lake_copy / "CURRENT").write_text("3\n")
    holder = hold_lock(lake_copy, 60)
    try:
        errors = set()
        for result in in_parallel([commands[0], commands[3]]):  # the demo's progress line (stderr) comes first
            assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
            [line] = [line for line in result.stderr.splitlines() if line.startswith("autheval: error:")]
            assert f"lake {lake_copy} in use by run holder" in line
            errors.add(line)
        assert len(errors) == 1, errors
    finally:
        holder.kill()
        holder.wait()


def test_a_dagster_run_refused_by_the_lock_names_the_lock_not_the_wrapper(lake_copy):
    from assets.trend import recurring_evaluation_job
    from dagster_project.definitions import build_definitions, project_instance
    from dagster_project.demo import QUIET
    from dagster_project.monitor_run import _failure

    holder = hold_lock(lake_copy, 60)
    try:
        instance = project_instance()
        result = (
            build_definitions(str(lake_copy))
            .resolve_job_def(recurring_evaluation_job.name)
            .execute_in_process(instance=instance, run_config=QUIET, raise_on_error=False)
        )
        assert not result.success
        why = _failure(instance, result.run_id)
        assert why.startswith(f"lake {lake_copy} in use by run holder"), why
        assert "Dagster" not in why and "resource_fn" not in why
    finally:
        holder.kill()
        holder.wait()


# --- 18. every AUTHEVAL_* setting checked where it is read, named in its one line ---------------------------

BAD_SETTINGS = [
    ("AUTHEVAL_DUCKDB_MEMORY", "abc"),
    ("AUTHEVAL_DUCKDB_MEMORY", "0"),
    ("AUTHEVAL_DUCKDB_MEMORY", "-1"),
    ("AUTHEVAL_DUCKDB_MEMORY", "99999999TB"),
    ("AUTHEVAL_THREADS", "abc"),
    ("AUTHEVAL_THREADS", "0"),
    ("AUTHEVAL_THREADS", "-1"),
    ("AUTHEVAL_THREADS", "99999999"),
    ("AUTHEVAL_QUERY_SPILL", "abc"),
    ("AUTHEVAL_QUERY_SPILL", "-1"),
    ("AUTHEVAL_KEEP_SNAPSHOTS", "0"),
    ("AUTHEVAL_KEEP_SNAPSHOTS", "-1"),
    ("AUTHEVAL_KEEP_SNAPSHOTS", "abc"),
    ("AUTHEVAL_KEEP_SNAPSHOTS", "1" * 30),
    ("AUTHEVAL_LAKE_WAIT", "abc"),
    ("AUTHEVAL_LAKE_WAIT", "-1"),
    ("AUTHEVAL_LAKE_WAIT", "nan"),
    ("AUTHEVAL_LAKE_WAIT", "inf"),
    ("AUTHEVAL_LAKE_WAIT", "1e300"),
    ("AUTHEVAL_LAKE", ""),
    ("AUTHEVAL_LAKE", " lake"),
    ("AUTHEVAL_LANDING", "land\ning"),
    ("AUTHEVAL_SOURCE", "abc"),
    ("AUTHEVAL_ENGINE", "abc"),
    ("AUTHEVAL_MODELS", "abc"),
    ("AUTHEVAL_MODELS", "-1"),
    ("AUTHEVAL_FINETUNE", "2"),
    ("AUTHEVAL_GRPO", "maybe"),
    ("AUTHEVAL_MONITOR_TZ", "abc"),
    ("AUTHEVAL_MEMORY_LIMIT", "abc"),
]


@pytest.mark.parametrize("name, value", BAD_SETTINGS, ids=[f"{n}={v[:12]!r}" for n, v in BAD_SETTINGS])
def test_a_bad_setting_is_one_line_naming_its_variable(monkeypatch, name, value):
    from assets.resources import check_environment

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        check_environment()
    assert name in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_good_settings_pass(monkeypatch):
    from assets.resources import check_environment
    from warehouse.sql import duckdb_memory_limit

    for name, value in [
        ("AUTHEVAL_DUCKDB_MEMORY", "3GB"),
        ("AUTHEVAL_THREADS", "2"),
        ("AUTHEVAL_KEEP_SNAPSHOTS", "3"),
        ("AUTHEVAL_LAKE_WAIT", "1.5"),
        ("AUTHEVAL_MODELS", "0"),
        ("AUTHEVAL_SOURCE", "synthetic"),
        ("AUTHEVAL_LANDING", ""),
    ]:
        monkeypatch.setenv(name, value)
    check_environment()
    assert duckdb_memory_limit() == "3GB"
    monkeypatch.setenv("AUTHEVAL_DUCKDB_MEMORY", "536870912")  # plain bytes: given a unit DuckDB reads
    assert duckdb_memory_limit() == "524288KiB"


@pytest.mark.parametrize("command", ["monitor run", "query"])
def test_a_bad_duckdb_memory_is_one_line_from_every_command(lake_copy, command):
    args = {
        "monitor run": ("monitor", "run", "--lake", str(lake_copy)),
        "query": ("query", "select 1", "--lake", str(lake_copy)),
    }[command]
    before = listing(lake_copy)
    result = cli(*args, env={"AUTHEVAL_DUCKDB_MEMORY": "abc"})
    one_line_error(result, "$AUTHEVAL_DUCKDB_MEMORY='abc'")
    assert listing(lake_copy) == before


def test_a_wait_for_the_lock_is_bounded_by_the_setting(tmp_path, monkeypatch):
    root = tmp_path / "lake"
    small_lake(root, writes=1)
    holder = hold_lock(root, 60)
    try:
        monkeypatch.setenv("AUTHEVAL_LAKE_WAIT", "0.5")
        with pytest.raises(LakeBusy, match="in use by run holder"):
            Lake(root).write("a", table(2))
    finally:
        holder.kill()
        holder.wait()


def test_landed_is_said_only_after_its_commit(tmp_path, monkeypatch):
    """A run killed between landing a file and committing it must not have printed `landed` for it
    (cron's log would claim a landing the lake does not hold): the line follows the commit."""
    from warehouse.snapshots import LakeRun

    root = tmp_path / "lake"
    drop_logs(root)
    lines: list[str] = []

    class Killed(BaseException):
        pass

    def killed_commit(self, *args, **kwargs):
        raise Killed

    monkeypatch.setattr(LakeRun, "commit", killed_commit)
    from dagster_project.monitor_run import monitor_run

    with pytest.raises(Killed):
        monitor_run(root, None, out=lines.append, settle_seconds=0.2)
    assert not any(line.startswith("landed") for line in lines), lines


@pytest.mark.parametrize(
    "name, said",
    [("q?lake", "'?'"), ("p%3Flake", "'%'"), ("s*lake", "'\\*'")],
    ids=["question-mark", "percent", "star"],
)
def test_a_lake_folder_whose_path_its_databases_cannot_open_is_refused_in_one_line(tmp_path, name, said):
    """The lake opens its DuckDB catalog and its Dagster instance's SQLite files by URL-like paths: a '?'
    or '%' in its folder failed later naming another file (`no such table: event_logs`, a WAL path cut at
    the '?'); DuckDB reads a '*' in its files' paths as a glob (a sibling folder's partitions were read
    too). Refused by the lake itself and by every entry point before anything is made."""
    root = tmp_path / name
    with pytest.raises(ValueError, match=f"lake folder .*{name[0]}.*must not hold {said}"):
        Lake(root)
    for command in (["demo"], ["monitor", "run"], ["ui", "--port", "1"]):
        done = run_cli(*command, "--lake", str(root), env=ENV, timeout=300)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        [line] = done.stderr.strip().splitlines()
        assert f"lake folder '{root}'" in line and f"must not hold {said.replace(chr(92), '')}" in line, (command, line)
    assert not root.exists()
    Lake(tmp_path / "h#lake")  # other characters are a folder name like any
