"""The lake as a system of record (warehouse/snapshots.py): a run commits whole or not at all, one writer
at a time, earlier snapshots stay queryable, and what a failed or killed run left is cleaned up."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import ROOT, run_cli
from warehouse import snapshots
from warehouse.catalog import query
from warehouse.lake import Lake
from warehouse.snapshots import LakeBusy, SnapshotError


def table(value: int, n: int = 3) -> pa.Table:
    return pa.table({"run": [value] * n, "i": list(range(n))})


def run_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "runs").rglob("*") if p.is_file())


def test_a_run_commits_every_table_together(tmp_path):
    lake = Lake(tmp_path / "lake")
    with lake.open_run("first"):
        lake.write("a", table(1))
        lake.write("b", table(1))
    with lake.open_run("second") as run:
        lake.write("a", table(2))
        assert lake.read("a").column("run")[0].as_py() == 2  # the run reads what it staged
        assert query(lake, "select distinct run from a").to_pylist() == [{"run": 1}]  # readers do not, yet
        lake.write("b", table(2))
        assert run.committed == []
    assert query(lake, "select distinct a.run as a, b.run as b from a, b").to_pylist() == [{"a": 2, "b": 2}]
    served = lake.snapshot()
    assert (served.snapshot, served.run_id, served.parent) == (2, "second", 1)


def test_a_failed_run_commits_nothing_and_leaves_no_file(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write("a", table(1))
    before = run_files(lake.root)
    with pytest.raises(RuntimeError, match="boom"):
        with lake.open_run("failing"):
            lake.write("a", table(2))
            lake.write("b", table(2))
            staged = lake.publish_path("reports/report.md")
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_text("half")
            raise RuntimeError("boom")
    assert lake.snapshot().snapshot == 1 and set(lake.tables()) == {"a"}
    assert lake.read("a").column("run")[0].as_py() == 1
    assert run_files(lake.root) == before and not (lake.root / "reports" / "report.md").exists()


def test_a_second_writer_is_told_who_holds_the_lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    with lake.open_run("holder"):
        with pytest.raises(LakeBusy, match=r"in use by run holder \(this process\)"):
            with Lake(lake.root).open_run("second"):
                pass
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from warehouse.lake import Lake\nwith Lake(sys.argv[1]).open_run('second'): pass",
                str(lake.root),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
        )
        assert other.returncode != 0
        assert f"LakeBusy: lake {lake.root} in use by run holder (pid {os.getpid()}" in other.stderr
    with Lake(lake.root).open_run("second"):  # released at the end of the block
        pass


def test_the_lock_dies_with_a_killed_writer(tmp_path):
    root = tmp_path / "lake"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; import pyarrow as pa; from warehouse.lake import Lake\n"
                "lake = Lake(sys.argv[1])\n"
                "with lake.open_run('killed'):\n"
                "    lake.write('a', pa.table({'x': [1]}))\n"
                "    print('staged', flush=True); time.sleep(60)\n"
            ),
            str(root),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "staged"
    with pytest.raises(LakeBusy, match="in use by run killed"):
        Lake(root).open_run("too-early").__enter__()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert list((root / "runs" / "killed").iterdir())  # what it staged is still there ...
    with Lake(root).open_run("next"):  # ... until the next writer takes the lock and cleans up
        assert not (root / "runs" / "killed").exists()
    assert Lake(root).snapshot().snapshot == 0 and Lake(root).tables() == {}


def test_an_interrupted_commit_is_undone(tmp_path):
    """A manifest written past CURRENT (killed before the pointer moved) is not served and is removed."""
    lake = Lake(tmp_path / "lake")
    lake.write("a", table(1))
    orphan = lake.root / "runs" / "ghost" / "a.0.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"PAR1 half")
    manifest = json.loads((lake.root / "snapshots" / "00000001.json").read_text())
    manifest.update(snapshot=2, run_id="ghost", tables={"a": {"file": "runs/ghost/a.0.parquet"}})
    (lake.root / "snapshots" / "00000002.json").write_text(json.dumps(manifest))
    (lake.root / "snapshots" / ".pending-00000002").write_text("ghost\n")  # the marker a killed commit leaves
    assert lake.snapshot().snapshot == 1 and lake.read("a").num_rows == 3
    lake.write("b", table(3))
    assert lake.snapshot().snapshot == 2 and lake.snapshot().run_id.startswith("write-")
    assert not orphan.exists() and set(lake.tables()) == {"a", "b"}


def test_earlier_snapshots_stay_queryable_for_the_declared_number(tmp_path):
    lake = Lake(tmp_path / "lake", keep_snapshots=2)
    for value in (1, 2, 3):
        lake.write("a", table(value))
    assert [m.snapshot for m in snapshots.committed_snapshots(lake.location)] == [2, 3]
    assert query(Lake(lake.root, snapshot=2), "select distinct run from a").to_pylist() == [{"run": 2}]
    assert Lake(lake.root, snapshot=2).read("a").column("run")[0].as_py() == 2
    kept = query(lake, "select snapshot, served from lake_snapshots order by 1").to_pylist()
    assert kept == [{"snapshot": 2, "served": False}, {"snapshot": 3, "served": True}]
    with pytest.raises(SnapshotError, match=r"snapshot 1 is not kept in lake .* \(kept: 2, 3\)"):
        Lake(lake.root, snapshot=1).read("a")
    assert len(run_files(lake.root)) == 2  # snapshot 1's file went with it
    with pytest.raises(ValueError, match="pinned to snapshot 2"):
        Lake(lake.root, snapshot=2).write("a", table(9))


def test_partitions_are_kept_across_runs(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write_partition("landed", "k1", table(1))
    with lake.open_run("second"):
        lake.write_partition("landed", "k2", table(2))
        lake.write_partition("landed", "k1", table(3))  # replaced, not added
    rows = query(lake, "select run, count(*) as n from landed group by 1 order by 1").to_pylist()
    assert rows == [{"run": 2, "n": 3}, {"run": 3, "n": 3}]


def test_a_published_file_appears_with_its_commit(tmp_path):
    lake = Lake(tmp_path / "lake")
    with lake.open_run("r"):
        staged = lake.publish_path("reports/report.md")
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text("new")
        assert not (lake.root / "reports" / "report.md").exists()
    assert (lake.root / "reports" / "report.md").read_text() == "new"


def test_the_retention_is_a_declared_number(tmp_path, monkeypatch):
    monkeypatch.setenv(snapshots.KEEP_ENV, "0")
    with pytest.raises(SnapshotError, match="at least 1 snapshot"):
        Lake(tmp_path / "lake").write("a", table(1))
    monkeypatch.setenv(snapshots.KEEP_ENV, "ten")
    with pytest.raises(SnapshotError, match="AUTHEVAL_KEEP_SNAPSHOTS='ten'"):
        Lake(tmp_path / "lake").write("a", table(1))
    assert not (tmp_path / "lake" / "runs").exists()
    monkeypatch.setenv(snapshots.KEEP_ENV, "3")
    monkeypatch.setenv(snapshots.WAIT_ENV, "soon")
    with pytest.raises(SnapshotError, match="AUTHEVAL_LAKE_WAIT='soon': must be a number of seconds"):
        Lake(tmp_path / "lake").write("a", table(1))


# -- a real run, killed, stopped by a full disk, raced -------------------------------------------------

CONSISTENT = (
    "select (select count(*) from records r join images i on r.case_id = i.image_id) as joined, "
    "(select count(*) from records) as records, (select min(run_id) from lake_snapshots where served) as run"
)


def served_state(root: Path) -> dict:
    return query(Lake(root), CONSISTENT).to_pylist()[0]


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("killed") / "lake"
    result = run_cli("demo", "--lake", str(root), "--reps", "200")
    assert result.returncode == 0, result.stderr[-2000:]
    state = served_state(root)
    assert state["joined"] == state["records"] > 0
    return root, state


@pytest.mark.parametrize("stage", [1, 3, 5, 6])
def test_kill_9_mid_run_serves_the_previous_snapshot(demo_lake, stage):
    root, first = demo_lake
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "autheval", "demo", "--lake", str(root), "--reps", "300"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in demo.stderr:
        if line.startswith(f"[{stage}/"):
            break
    demo.send_signal(signal.SIGKILL)
    demo.wait(timeout=60)
    assert served_state(root) == first  # a whole snapshot: the previous one
    left = [p for p in (root / "runs").iterdir() if p.name != first["run"]]
    assert left, "the killed run had staged files"  # ... cleaned up by the next writer:
    with Lake(root).open_run("cleaner"):
        assert [p.name for p in (root / "runs").iterdir()] == [first["run"]]


def test_a_full_disk_mid_run_keeps_the_previous_snapshot(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2600k", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        root = mount / "lake"
        # the run history (Dagster's sqlite instance) outside the small disk: the lake's files fill it
        env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
        assert run_cli("demo", "--lake", str(root), "--reps", "200", env=env).returncode == 0
        first = served_state(root)
        files = run_files(root)
        result = run_cli("demo", "--lake", str(root), "--reps", "200", env=env)
        assert result.returncode != 0
        assert "No space left on device" in result.stderr
        assert served_state(root) == first and run_files(root) == files  # nothing partial left behind
        assert not [p for p in root.rglob("*") if p.name.endswith((".tmp", ".wal"))]
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_rejected_run_serves_the_previous_snapshot(demo_lake, tmp_path, monkeypatch):
    """A run that fails after writing tables (here: the scores stage refuses) commits none of them."""
    import assets.scores
    from dagster_project.demo import run_stages  # first: the asset modules import through the definitions

    root, _ = demo_lake
    copy = tmp_path / "lake"
    shutil.copytree(root, copy)
    before = served_state(copy)
    monkeypatch.setattr(assets.scores, "write_table", lambda *a, **k: (_ for _ in ()).throw(ValueError("refused")))
    with pytest.raises(Exception, match="refused"):
        run_stages(copy, out=lambda line: None)
    assert served_state(copy) == before
    assert [p.name for p in (copy / "runs").iterdir()] == [before["run"]]


def test_readers_during_a_run_see_one_snapshot(demo_lake, tmp_path):
    root, _ = demo_lake
    copy = tmp_path / "lake"
    shutil.copytree(root, copy)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "autheval", "demo", "--lake", str(copy), "--reps", "200"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen, deadline = set(), time.time() + 120
    while demo.poll() is None and time.time() < deadline:
        state = served_state(copy)
        assert state["joined"] == state["records"] > 0, state
        seen.add(state["run"])
    assert demo.wait(timeout=120) == 0, demo.stderr.read()[-2000:]
    seen.add(served_state(copy)["run"])
    assert len(seen) == 2  # the old snapshot while it ran, then the new one


def test_query_reads_an_earlier_snapshot(tmp_path):
    lake = Lake(tmp_path / "lake")
    for value in (1, 2):
        lake.write("a", table(value))
    for flags, expected in (((), "2"), (("--snapshot", "1"), "1")):
        result = run_cli("query", "select distinct run from a", "--lake", str(lake.root), "--format", "csv", *flags)
        assert result.returncode == 0 and result.stdout.splitlines() == ["run", expected], result.stderr
    kept = run_cli(
        "query", "select snapshot, served from lake_snapshots order by 1", "--lake", str(lake.root), "--format", "csv"
    )
    assert kept.stdout.splitlines() == ["snapshot,served", "1,False", "2,True"]
    missing = run_cli("query", "select 1", "--lake", str(lake.root), "--snapshot", "7")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"autheval: error: snapshot 7 is not kept in lake {lake.root} (kept: 1, 2)"
